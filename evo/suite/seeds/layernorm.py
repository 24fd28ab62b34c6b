"""Seed kernel for layernorm: three passes over the row (mean, variance, normalise+affine) in BLOCK_SIZE chunks, one program per row."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

# Tunable constants: the engine's offline mutation operator rewrites these module-level
# UPPER-CASE integer assignments (powers of two), so every value in the stated range must stay correct.
BLOCK_SIZE = 256   # 16..4096
NUM_WARPS = 4      # 1..32 (launch parameter)
NUM_STAGES = 1     # 1..4 (launch parameter)

EPS = 1e-5


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, stride_xm, stride_om, eps,
                     BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    out_row = out_ptr + row * stride_om
    offs = tl.arange(0, BLOCK_SIZE)

    # pass 1: mean
    s_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        s_acc += x
    mean = tl.sum(s_acc, axis=0) / n_cols

    # pass 2: variance (two-pass for accuracy)
    v_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        v_acc += d * d
    var = tl.sum(v_acc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)

    # pass 3: normalise, scale, shift
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(out_row + cols, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, eps=EPS):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        x = x.contiguous()
        weight = weight.contiguous()
        bias = bias.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        grid = (n_rows,)
        layernorm_kernel[grid](x, weight, bias, out, n_cols, x.stride(0), out.stride(0), self.eps,
                               BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return out

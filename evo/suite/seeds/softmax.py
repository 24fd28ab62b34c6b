"""Seed kernel for softmax: three passes over the row (max, sum of exp, normalise) in BLOCK_SIZE chunks, one program per row."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

# Tunable constants: the engine's offline mutation operator rewrites these module-level
# UPPER-CASE integer assignments (powers of two), so every value in the stated range must stay correct.
BLOCK_SIZE = 256   # 16..4096
NUM_WARPS = 4      # 1..32 (launch parameter)
NUM_STAGES = 1     # 1..4 (launch parameter)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_om, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    out_row = out_ptr + row * stride_om
    offs = tl.arange(0, BLOCK_SIZE)

    # pass 1: row maximum
    m_acc = tl.full([BLOCK_SIZE], float("-inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_acc = tl.maximum(m_acc, x)
    row_max = tl.max(m_acc, axis=0)

    # pass 2: sum of exp(x - max)
    s_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        s_acc += tl.where(mask, tl.exp(x - row_max), 0.0)
    inv_sum = 1.0 / tl.sum(s_acc, axis=0)

    # pass 3: normalise and store
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        y = tl.exp(x - row_max) * inv_sum
        tl.store(out_row + cols, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        grid = (n_rows,)
        softmax_kernel[grid](x, out, n_cols, x.stride(0), out.stride(0),
                             BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return out

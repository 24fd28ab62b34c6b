"""Seed kernel for bias_gelu: gelu(x + bias[col]) over the flattened tensor (col = index % cols), 1-D grid of cdiv(n, BLOCK_SIZE) programs."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

# Tunable constants: the engine's offline mutation operator rewrites these module-level
# UPPER-CASE integer assignments (powers of two), so every value in the stated range must stay correct.
BLOCK_SIZE = 1024  # 16..4096
NUM_WARPS = 4      # 1..32 (launch parameter)
NUM_STAGES = 1     # 1..4 (launch parameter)


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + offs % n_cols, mask=mask, other=0.0).to(tl.float32)
    h = x + b
    y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        x = x.contiguous()
        bias = bias.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, BLOCK_SIZE),)
        bias_gelu_kernel[grid](x, bias, out, n, bias.numel(),
                               BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return out

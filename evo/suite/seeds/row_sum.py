"""Seed kernel for row_sum: one program per row accumulating BLOCK_SIZE chunks of the row, then one reduction."""
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
def row_sum_kernel(x_ptr, out_ptr, n_cols, stride_xm, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    offs = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
        grid = (n_rows,)
        row_sum_kernel[grid](x, out, n_cols, x.stride(0),
                             BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return out

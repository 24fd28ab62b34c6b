"""Seed kernel for cross_entropy: one program per row, two passes (max, sum of exp) in BLOCK_SIZE chunks giving loss = log(sum) + max - x[target]; the mean over rows in a second, one-program kernel."""
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
def cross_entropy_kernel(logits_ptr, targets_ptr, loss_ptr, n_cols, stride_lm,
                         BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    l_row = logits_ptr + row * stride_lm
    offs = tl.arange(0, BLOCK_SIZE)

    # pass 1: row maximum
    m_acc = tl.full([BLOCK_SIZE], float("-inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        x = tl.load(l_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_acc = tl.maximum(m_acc, x)
    row_max = tl.max(m_acc, axis=0)

    # pass 2: sum of exp(x - max)
    s_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(l_row + cols, mask=mask, other=0.0).to(tl.float32)
        s_acc += tl.where(mask, tl.exp(x - row_max), 0.0)
    lse = tl.log(tl.sum(s_acc, axis=0)) + row_max

    target = tl.load(targets_ptr + row)
    x_t = tl.load(l_row + target).to(tl.float32)
    tl.store(loss_ptr + row, lse - x_t)


@triton.jit
def mean_kernel(loss_ptr, out_ptr, n_rows, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_rows, BLOCK_SIZE):
        rows = start + offs
        acc += tl.load(loss_ptr + rows, mask=rows < n_rows, other=0.0)
    tl.store(out_ptr, (tl.sum(acc, axis=0) / n_rows).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        logits = logits.contiguous()
        targets = targets.contiguous()
        n_rows, n_cols = logits.shape
        losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
        grid = (n_rows,)
        cross_entropy_kernel[grid](logits, targets, losses, n_cols, logits.stride(0),
                                   BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        out = torch.empty((), dtype=logits.dtype, device=logits.device)
        mean_kernel[(1,)](losses, out, n_rows, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)
        return out

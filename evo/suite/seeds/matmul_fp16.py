"""Seed kernel for matmul_fp16: plain 2-D grid of (BLOCK_M, BLOCK_N) output tiles, each looping over K in BLOCK_K chunks with tl.dot into an fp32 accumulator, masks on all edges."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

# Tunable constants: the engine's offline mutation operator rewrites these module-level
# UPPER-CASE integer assignments (powers of two), so every value in the stated range must stay correct.
BLOCK_M = 64       # 16..128
BLOCK_N = 64       # 16..128
BLOCK_K = 32       # 16..128
NUM_WARPS = 4      # 1..32 (launch parameter)
NUM_STAGES = 2     # 1..4 (launch parameter)
# Note: BLOCK_M = BLOCK_N = BLOCK_K = 128 with NUM_STAGES = 4 needs 256 KiB of shared memory, more
# than an H100/H200 has: Triton refuses it at compile time (OutOfResources), it never computes wrongly.


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    mask_m = offs_m[:, None] < M
    mask_n = offs_n[None, :] < N

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        k_mask = (k + offs_k) < K
        a = tl.load(a_ptrs, mask=mask_m & k_mask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_mask[:, None] & mask_n, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=mask_m & mask_n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        M, K = A.shape
        K2, N = B.shape
        assert K == K2
        C = torch.empty((M, N), dtype=torch.float16, device=A.device)
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        matmul_kernel[grid](A, B, C, M, N, K,
                            A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
                            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                            num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return C

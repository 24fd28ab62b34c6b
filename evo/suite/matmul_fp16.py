"""fp16 matrix product C = A @ B with A (M, K), B (K, N); fp16 output."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


# KernelBench globals for the default (timing) shape
M = 4096
K = 4096
N = 4096


def get_inputs(M=M, K=K, N=N):
    return [torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)]


def get_init_inputs():
    return []


# --- evo extensions ---
SHAPES = [
    dict(M=1, K=127, N=63),
    dict(M=33, K=257, N=65),
    dict(M=127, K=129, N=255),
    dict(M=2048, K=2048, N=2048),
    dict(M=4096, K=4096, N=4096),
]
ATOL = 1e-2
RTOL = 1e-2


def flops(A, B) -> float:
    m, k = A.shape
    n = B.shape[1]
    return 2.0 * m * n * k


def bytes_moved(A, B) -> float:
    # read A and B once; write C once
    m, k = A.shape
    n = B.shape[1]
    return (m * k + k * n + m * n) * A.element_size()

"""Sum over the last dimension of a 2-D fp32 tensor; output shape (rows,)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=-1)


# KernelBench globals for the default (timing) shape
rows = 4096
cols = 8192


def get_inputs(rows=rows, cols=cols):
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []


# --- evo extensions ---
SHAPES = [
    dict(rows=1, cols=1023),
    dict(rows=33, cols=257),
    dict(rows=7, cols=4097),
    dict(rows=4096, cols=8192),
]
ATOL = 1e-4
RTOL = 1e-4


def flops(x) -> float:
    # one add per element
    return 1.0 * x.numel()


def bytes_moved(x) -> float:
    # read x once; write one value per row
    return (x.numel() + x.shape[0]) * x.element_size()

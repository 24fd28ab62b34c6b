"""Row softmax over the last dimension of a 2-D fp32 tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


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
ATOL = 1e-6  # outputs are ~1e-3 or smaller: a looser atol would accept a 0.1% scaling error
RTOL = 1e-4


def flops(x) -> float:
    # max, subtract, exp, sum, divide: ~5 operations per element
    return 5.0 * x.numel()


def bytes_moved(x) -> float:
    # read x once, write the output once
    return 2.0 * x.numel() * x.element_size()

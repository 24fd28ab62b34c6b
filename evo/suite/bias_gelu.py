"""Bias add broadcast over rows followed by exact (erf) GELU, fp32: gelu(x + bias)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        # bias is an input (not a parameter) so that one get_init_inputs()
        # serves every shape in SHAPES.
        return F.gelu(x + bias)


# KernelBench globals for the default (timing) shape (2^25 elements)
rows = 4096
cols = 8192


def get_inputs(rows=rows, cols=cols):
    return [torch.randn(rows, cols), torch.randn(cols)]


def get_init_inputs():
    return []


# --- evo extensions ---
SHAPES = [
    dict(rows=1, cols=1023),
    dict(rows=33, cols=257),
    dict(rows=127, cols=509),
    dict(rows=4096, cols=8192),
]
ATOL = 1e-4
RTOL = 1e-4


def flops(x, bias) -> float:
    # bias add (1) + GELU (5) per element
    return 6.0 * x.numel()


def bytes_moved(x, bias) -> float:
    # read x and bias once; write the output once
    return (2.0 * x.numel() + bias.numel()) * x.element_size()

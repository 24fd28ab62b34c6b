"""RMS norm over the last dimension of a 2-D fp32 tensor, with elementwise weight (eps 1e-6)."""
import torch
import torch.nn as nn

EPS = 1e-6


class Model(nn.Module):
    def __init__(self, eps=EPS):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        # weight is an input (not a parameter) so that one get_init_inputs()
        # serves every shape in SHAPES.
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * weight


# KernelBench globals for the default (timing) shape
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
    dict(rows=7, cols=4097),
    dict(rows=4096, cols=8192),
]
ATOL = 1e-4
RTOL = 1e-4


def flops(x, weight) -> float:
    # square+sum (2), normalise (1), scale (1) per element
    return 4.0 * x.numel()


def bytes_moved(x, weight) -> float:
    # read x and weight once; write the output once
    return (2.0 * x.numel() + weight.numel()) * x.element_size()

"""Layer norm over the last dimension of a 2-D fp32 tensor, with elementwise weight and bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F

EPS = 1e-5


class Model(nn.Module):
    def __init__(self, eps=EPS):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        # weight and bias are inputs (not parameters) so that one get_init_inputs()
        # serves every shape in SHAPES.
        return F.layer_norm(x, (x.shape[-1],), weight, bias, self.eps)


# KernelBench globals for the default (timing) shape
rows = 4096
cols = 8192


def get_inputs(rows=rows, cols=cols):
    return [torch.randn(rows, cols), torch.randn(cols), torch.randn(cols)]


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


def flops(x, weight, bias) -> float:
    # mean (1), centre (1), square+sum (2), normalise (1), scale and shift (2) per element
    return 7.0 * x.numel()


def bytes_moved(x, weight, bias) -> float:
    # read x, weight, bias once; write the output once
    return (2.0 * x.numel() + weight.numel() + bias.numel()) * x.element_size()

"""A reference torch.compile makes no all-Triton graph of (an FFT is a library call): no seed."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x, dim=-1).abs()


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return []

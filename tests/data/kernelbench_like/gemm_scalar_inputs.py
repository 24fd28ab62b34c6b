"""Scalar, integer and boolean inputs beside a tensor, a Linear layer (a GEMM), several outputs."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x, scale, steps, negate):
        y = self.linear(x) * scale
        for _ in range(steps):
            y = y + 1.0
        if negate:
            y = -y
        return y, y.amax(dim=1)


def get_inputs():
    return [torch.rand(16, 32), 0.25, 2, True]


def get_init_inputs():
    return [32, 24]

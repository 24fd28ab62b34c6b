"""A reference that raises: set aside at start-up, the run goes on (issue 14, deliverable 2)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("this reference is broken")


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []

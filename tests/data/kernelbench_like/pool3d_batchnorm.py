"""A 3x3x3 max pool (past inductor's window limit), batch norm with its running buffers and
parameters (eval mode), and two outputs."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels):
        super(Model, self).__init__()
        self.pool = nn.MaxPool3d(kernel_size=3, stride=2, padding=1)
        self.norm = nn.BatchNorm3d(channels)
        with torch.no_grad():
            self.norm.running_mean.uniform_(-0.5, 0.5)
            self.norm.running_var.uniform_(0.5, 1.5)
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        y = self.norm(self.pool(x))
        return y, y.mean(dim=(2, 3, 4))


def get_inputs():
    return [torch.rand(2, 3, 6, 7, 8)]


def get_init_inputs():
    return [3]

"""Old-style super(Model, self), constructor arguments, a class attribute read as Model.SCALE,
a module constant defined after the class: a 2D convolution with bias, ReLU and a scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    SCALE = 0.5

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.scale = Model.SCALE * OFFSET

    def forward(self, x):
        return torch.relu(self.conv(x)) * self.scale


batch_size = 2
in_channels = 3
out_channels = 8
height, width = 10, 12
OFFSET = 2.0


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, 3, 2, 1]

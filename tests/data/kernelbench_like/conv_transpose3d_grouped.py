"""A transposed 3D convolution, strided, padded, dilated, grouped, with output padding, then an
in-place operation on the intermediate and a reduction over channels."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, dilation):
        super(Model, self).__init__()
        self.conv_t = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                         output_padding=output_padding, groups=groups, dilation=dilation)

    def forward(self, x):
        y = self.conv_t(x)
        y.mul_(2.0)
        return y.sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.rand(2, 4, 3, 4, 5)]


def get_init_inputs():
    return [4, 6, (3, 2, 3), (2, 2, 1), (1, 0, 1), (1, 1, 0), 2, (1, 2, 1)]

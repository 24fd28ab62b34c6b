"""Mean cross-entropy of fp32 logits (N, C) against int64 class targets (N,); scalar output."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


# KernelBench globals for the default (timing) shape
batch_size = 4096
num_classes = 32000


def get_inputs(batch_size=batch_size, num_classes=num_classes):
    logits = torch.randn(batch_size, num_classes)
    targets = torch.randint(0, num_classes, (batch_size,))
    return [logits, targets]


def get_init_inputs():
    return []


# --- evo extensions ---
SHAPES = [
    dict(batch_size=1, num_classes=1023),
    dict(batch_size=33, num_classes=257),
    dict(batch_size=7, num_classes=4097),
    dict(batch_size=4096, num_classes=32000),
]
ATOL = 1e-4
RTOL = 1e-4


def flops(logits, targets) -> float:
    # max, subtract, exp, sum per logit; log, subtract per row; the mean
    n, c = logits.shape
    return 4.0 * n * c + 3.0 * n


def bytes_moved(logits, targets) -> float:
    # read the logits and the targets once; write one scalar
    return logits.numel() * logits.element_size() + targets.numel() * targets.element_size() + logits.element_size()

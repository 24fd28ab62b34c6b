"""A task that doubles a vector, and its Triton candidate with a hook where a test puts what it tries."""

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2.0

def get_inputs(n=1000):
    return [torch.randn(n)]

def get_init_inputs():
    return []

SHAPES = [dict(n=127), dict(n=4097)]
'''

GOOD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 256

@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        PREPARE
        double_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out
'''


def candidate(prepare: str = "pass", body: str = GOOD) -> str:
    return body.replace("PREPARE", prepare)

"""An offline operator's child of a source taken as a seed, and a kernel no rewrite applies to."""
from __future__ import annotations

import numpy as np

from evo.core.program import Program
from operators import Context, Operator, Proposal

# one elementwise kernel: no GEMM template, no reduction, no convolution
ELEMENTWISE = '''import torch
import triton
import triton.language as tl

K0_BLOCK = 128


@triton.jit
def add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, offsets < n) + 1, offsets < n)
'''


def as_seed(source: str, task: str = "t") -> Program:
    return Program(id=1, task=task, island=0, generation=0, operator="seed", source=source)


def child_of(operator: Operator, source: str, *, task: str = "t", task_source: str = "", seed: int = 0) -> Proposal:
    """``operator``'s proposal for ``source`` as a seed of ``task``, its RNG seeded with ``seed``."""
    context = Context(task_name=task, task_source=task_source, parent=as_seed(source, task))
    return operator.propose(context, np.random.default_rng(seed))

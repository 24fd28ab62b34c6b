"""Adversarial values hold the range only where the reference itself is ill-conditioned on them.

Attention over keys that nearly tie is well-conditioned at unit scale, but on inputs scaled by 1e3
which key wins is decided by rounding: the reference moves beyond the tolerance when its inputs move
by 4 units in the last place, so a correct kernel summing in another order cannot be held to it
(KernelBench's level1/97, ScaledDotProductAttention, on an H200: every seed failed there).  Such a
check still fails a kernel that overflows where the reference does not."""

from evaluator import Status

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, q, k, v):
        return torch.softmax(q @ k.T, dim=-1) @ v

def get_inputs(rows=8):
    base = torch.rand(1, 16)
    k = base * (1 + 1e-7 * torch.randn(16, 16))  # keys that nearly tie
    return [torch.rand(rows, 16), k, torch.rand(16, 16)]

def get_init_inputs():
    return []

SHAPES = [dict(rows=8), dict(rows=33)]
'''

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def attention_row(q_ptr, k_ptr, v_ptr, out_ptr, D: tl.constexpr, N: tl.constexpr):
    row = tl.program_id(0)
    d = tl.arange(0, D)
    n = tl.arange(0, N)
    q = tl.load(q_ptr + row * D + d)
    k = tl.load(k_ptr + n[:, None] * D + d[None, :])
    scores = tl.sum(q[None, :] * k, axis=1)
    SHIFT
    weights = tl.exp(scores)
    weights = weights / tl.sum(weights, axis=0)
    v = tl.load(v_ptr + n[:, None] * D + d[None, :])
    tl.store(out_ptr + row * D + d, tl.sum(weights[:, None] * v, axis=0))

class ModelNew(nn.Module):
    def forward(self, q, k, v):
        out = torch.empty_like(q)
        attention_row[(q.shape[0],)](q, k, v, out, D=16, N=16)
        return out
'''


def test_a_correct_kernel_passes_where_the_reference_is_ill_conditioned(cpu_evaluator):
    result = cpu_evaluator.evaluate("attention", TASK, KERNEL.replace("SHIFT", "scores = scores - tl.max(scores, axis=0)"))
    assert result.status is Status.CORRECT, result.reason
    # judged against the reference's float64 answer where the kernel is at least as close to it as
    # the reference (evaluator.float64_arbiter), on the range only where it is not
    held = result.extra.get("range_only", []) + [j.split(":")[0] for j in result.extra.get("judged_by_float64", [])]
    assert "very large values" in held, held
    assert "the range only, the reference itself ill-conditioned there" in result.reason
    assert "all-equal values" not in held  # exact ties: both give the same


def test_a_kernel_that_overflows_there_still_fails(cpu_evaluator):
    result = cpu_evaluator.evaluate("attention", TASK, KERNEL.replace("SHIFT", "pass"))  # no max subtracted
    assert result.status is Status.INCORRECT
    assert "beyond the reference's range" in result.reason and "NaN" in result.reason, result.reason

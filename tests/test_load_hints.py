"""The load-hints operator: one tl.load of the parent given other cache and eviction hints, the
rest of the kernel as it was."""
import ast

import numpy as np
import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evo.core.program import Program
from operators import Context
from operators.load_hints import COMBINATIONS, LoadHints, loads

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x * 2.0 + y


def get_inputs():
    return [torch.randn(1000), torch.randn(1000)]


def get_init_inputs():
    return []
'''

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 256
POLICY = "evict_last"


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")  # read once
    y = tl.load(
        y_ptr + (offs),  # brackets inside
        mask=offs < n,
    )
    tl.store(out_ptr + offs, x * 2.0 + y, mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        _axpy[(triton.cdiv(n, BLOCK_SIZE),)](x, y, out, n, BLOCK=BLOCK_SIZE)
        return out
'''


def _context(source: str) -> Context:
    parent = Program(id=1, task="axpy", island=0, generation=0, operator="seed", source=source)
    return Context(task_name="axpy", task_source=TASK, parent=parent)


def test_a_child_changes_one_loads_hints_and_nothing_else():
    assert [hints for *_, hints in loads(KERNEL)] == [("evict_first", ""), ("", "")]
    seen = set()
    for seed in range(40):
        proposal = LoadHints().propose(_context(KERNEL), np.random.default_rng(seed))
        child = proposal.source
        ast.parse(child)
        before, after = [h for *_, h in loads(KERNEL)], [h for *_, h in loads(child)]
        changed = [i for i, (b, a) in enumerate(zip(before, after)) if b != a]
        assert len(after) == 2 and len(changed) == 1, proposal.note
        assert after[changed[0]] in COMBINATIONS  # a policy or .cg, never both (ptxas rejects the pair)
        assert child.count("mask=offs < n") == KERNEL.count("mask=offs < n")  # the other arguments kept
        assert "tl.store(out_ptr + offs, x * 2.0 + y, mask=offs < n)" in child  # stores untouched
        seen.add(proposal.note)
    assert any(note.startswith("load 2 of 2 (line 15): -/- -> ") for note in seen)
    assert len(seen) > 4  # both loads, several of the three other combinations each


def test_a_load_whose_hint_is_an_expression_is_left_alone_and_no_load_means_no_child():
    variable = KERNEL.replace('eviction_policy="evict_first"', "eviction_policy=POLICY")
    assert [hints for *_, hints in loads(variable)] == [("", "")]  # only the second load
    nothing = Program(id=2, task="axpy", island=0, generation=0, operator="seed", source="x = 1\n")
    assert not LoadHints().applies_to(nothing) and LoadHints().applies_to(_context(KERNEL).parent)
    assert LoadHints().propose(_context("x = 1\n"), np.random.default_rng(0)).source is None


@pytest.mark.slow
def test_children_with_every_hint_run_and_are_correct():
    evaluator = Evaluator(EvaluatorSettings(device="cpu", timeout_s=120), "cpu")
    try:
        for seed in (0, 1, 2, 3):
            child = LoadHints().propose(_context(KERNEL), np.random.default_rng(seed)).source
            result = evaluator.evaluate("axpy", TASK, child)
            assert result.status is Status.CORRECT, (child, result.reason, result.error)
        cg = KERNEL.replace('eviction_policy="evict_first"', 'cache_modifier=".cg"')
        result = evaluator.evaluate("axpy", TASK, cg)
        assert result.status is Status.CORRECT, (result.reason, result.error)
    finally:
        evaluator.close()

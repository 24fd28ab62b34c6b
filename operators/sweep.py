"""A tuning sweep around a new elite: each of its tunable constants moved one step, one at a time.

Needs no LLM.  Inductor's autotuning benchmarks a few launch configurations of a kernel and keeps
the fastest; max-autotune benchmarks dozens of GEMM tiles.  The sweep does the same within the
search: when a kernel becomes its task's fastest elite, the run loop asks this operator for its
neighbours, every tunable halved and doubled (pipeline stages one fewer and one more), one change
per child, each evaluated and raced against the elite (a child clearly slower than its parent
stops after its short timing round), one proposal in two at most while the other operators go
on.  Children of a sweep start no sweep of their own: the next fastest elite found by the other
operators does.  ``max_children`` bounds a sweep; the neighbours are taken round-robin over the
tunables (each one's step down, then each one's step up), so a kernel with many constants still
gets every one of them moved.  The queue lives in the run loop's memory: a resumed run does not
finish a sweep cut short (its elites are still there for the other operators, and the duplicate
check skips any neighbour already evaluated).
"""
from __future__ import annotations

import numpy as np

from evo.core.kernel_source import RANGES, Tunable, find_tunables, with_values
from operators.base import Context, Operator, Proposal


def _steps(tunable: Tunable) -> list[int]:
    low, high = RANGES[tunable.kind]
    value = tunable.value
    steps = (value - 1, value + 1) if tunable.kind in ("stages", "switch") else (value // 2, value * 2)
    return [v if low <= v <= high and v != value else None for v in steps]


def neighbours(source: str) -> list[tuple[str, str]]:
    """``(note, child source)`` for every one-step move of one tunable of ``source``: first each
    tunable's step down, then each one's step up; children identical to another are left out."""
    tunables = find_tunables(source)
    steps = [_steps(t) for t in tunables]
    out, seen = [], {source}
    for direction in (0, 1):
        for tunable, options in zip(tunables, steps):
            value = options[direction]
            if value is None:
                continue
            child = with_values(source, {tunable: value})
            if child not in seen:
                seen.add(child)
                out.append((f"sweep: {tunable.name} {tunable.value}->{value}", child))
    return out


class TuningSweep(Operator):
    """The ``attempt``-th neighbour of a new elite (see the module's text); scheduled by the run loop."""

    name = "sweep"
    sweeps = True

    def __init__(self, *, max_children: int = 8):
        if max_children < 0:
            raise ValueError("max_children must be >= 0 (0: no sweeps)")
        self.max_children = max_children

    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        found = neighbours(context.parent.source)
        if context.attempt >= min(len(found), self.max_children):
            return Proposal(self.name, None, f"the sweep of this kernel has {len(found)} neighbours, "
                                             f"no {context.attempt + 1}th")
        note, child = found[context.attempt]
        return Proposal(self.name, child, note)

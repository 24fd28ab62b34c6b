"""Offline mutation of tunable constants: block sizes, num_warps, num_stages, grid shape.

Needs no LLM.  It picks one or more of the parent's tunable integer literals
(see ``evo.core.kernel_source``) and moves each to a neighbouring legal value:
powers of two are halved or doubled (sometimes by four), pipeline stages
step by one, a switch between two code paths (``USE_*``) flips.  Grid shape
constants (``ROWS_PER_PROGRAM``, ``PROGRAMS_PER_SM``, ``GRID_*``, ...) are
powers of two like block sizes.

A parent whose compiled kernels spill registers (its evaluation's ``spills``) gets no child with
more work per thread: no fewer warps, no larger blocks.  Those spill more, compile longer in ptxas
and run slower: a GEMM tile of 128 x 128 fp32 that spilled 50 registers with four warps spilled
360 with two (4.4x slower) and 5,104 with one (36x slower, 32-41 s to compile) on an H100
(experiments/throughput_bench.md, round 10).
"""
from __future__ import annotations

import numpy as np

from evo.core.kernel_source import RANGES, Tunable, find_tunables, with_values
from operators.base import Context, Operator, Proposal


def neighbour(tunable: Tunable, rng: np.random.Generator, spilling: bool = False) -> int | None:
    """A different legal value near the current one, or None if there is none (``spilling``: none
    that gives a thread more work, see the module's docstring)."""
    low, high = RANGES[tunable.kind]
    value = tunable.value
    if tunable.kind in ("stages", "switch"):  # a switch flips
        options = [v for v in (value - 1, value + 1) if low <= v <= high]
    else:
        options = [v for v in (value // 4, value // 2, value * 2, value * 4)
                   if low <= v <= high and v != value and v > 0]
        # Steps of two are twice as likely as steps of four.
        options = [v for v in options for _ in range(2 if v in (value // 2, value * 2) else 1)]
    if spilling and tunable.kind in ("warps", "block"):
        options = [v for v in options if (v > value) == (tunable.kind == "warps")]
    return int(options[int(rng.integers(len(options)))]) if options else None


class TunableConstantMutation(Operator):
    """Change up to ``max_changes`` tunable constants of the parent."""

    name = "constants"

    def __init__(self, *, max_changes: int = 2):
        if max_changes < 1:
            raise ValueError("max_changes must be at least 1")
        self.max_changes = max_changes

    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        tunables = find_tunables(context.parent.source)
        if not tunables:
            return Proposal(self.name, None, "the parent has no tunable integer constants")
        count = int(rng.integers(1, min(self.max_changes, len(tunables)) + 1))
        chosen = [tunables[int(i)] for i in rng.choice(len(tunables), size=count, replace=False)]
        spilling = bool(context.parent.result is not None and context.parent.result.spills)
        changes = {t: v for t in chosen if (v := neighbour(t, rng, spilling)) is not None}
        if not changes:
            return Proposal(self.name, None, "no legal neighbouring values"
                            + (" that do not spill more (the parent spills registers)" if spilling else ""))
        note = ", ".join(f"{t.name} {t.value}->{v}" for t, v in changes.items())
        return Proposal(self.name, with_values(context.parent.source, changes), note)

"""Offline mutation of tunable constants: block sizes, num_warps, num_stages, grid shape.

Needs no LLM.  It picks one or more of the parent's tunable integer literals
(see ``evo.kernel_source``) and moves each to a neighbouring legal value:
powers of two are halved or doubled (sometimes by four), pipeline stages
step by one.  Grid shape constants (``ROWS_PER_PROGRAM``, ``PROGRAMS_PER_SM``,
``GRID_*``, ...) are powers of two like block sizes.
"""
from __future__ import annotations

import numpy as np

from evo.kernel_source import RANGES, Tunable, find_tunables, with_values
from operators.base import Context, Operator, Proposal


def neighbour(tunable: Tunable, rng: np.random.Generator) -> int | None:
    """A different legal value near the current one, or None if there is none."""
    low, high = RANGES[tunable.kind]
    value = tunable.value
    if tunable.kind == "stages":
        options = [v for v in (value - 1, value + 1) if low <= v <= high]
    else:
        options = [v for v in (value // 4, value // 2, value * 2, value * 4)
                   if low <= v <= high and v != value and v > 0]
        # Steps of two are twice as likely as steps of four.
        options = [v for v in options for _ in range(2 if v in (value // 2, value * 2) else 1)]
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
        changes = {t: v for t in chosen if (v := neighbour(t, rng)) is not None}
        if not changes:
            return Proposal(self.name, None, "no legal neighbouring values")
        note = ", ".join(f"{t.name} {t.value}->{v}" for t, v in changes.items())
        return Proposal(self.name, with_values(context.parent.source, changes), note)

"""Offline crossover of parameter sets between elites.

Needs no LLM.  The child is the parent's source with some of its tunable
constants (block sizes, warps, stages; see ``evo.core.kernel_source``) set to the
values another elite of the task uses for the same constants: parameter sets
that did well in different cells or islands are recombined.
"""
from __future__ import annotations

import numpy as np

from evo.core.kernel_source import Tunable, find_tunables, with_values
from operators.base import Context, Operator, Proposal


def _keyed(tunables: list[Tunable]) -> dict[tuple[str, int], Tunable]:
    """Tunables by (name, occurrence): a name may appear at several launches."""
    seen: dict[str, int] = {}
    keyed = {}
    for t in tunables:
        keyed[(t.name, seen.get(t.name, 0))] = t
        seen[t.name] = seen.get(t.name, 0) + 1
    return keyed


class ParameterCrossover(Operator):
    """Take each differing shared tunable from a mate with probability ``swap_probability`` (at least one)."""

    name = "param_crossover"

    def __init__(self, *, swap_probability: float = 0.5):
        if not 0.0 < swap_probability <= 1.0:
            raise ValueError("swap_probability must be in (0, 1]")
        self.swap_probability = swap_probability

    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        mine = _keyed(find_tunables(context.parent.source))
        if not mine:
            return Proposal(self.name, None, "the parent has no tunable integer constants")
        for index in rng.permutation(len(context.inspirations)):
            mate = context.inspirations[int(index)]
            theirs = _keyed(find_tunables(mate.source))
            differing = [(t, theirs[k].value) for k, t in mine.items() if k in theirs and theirs[k].value != t.value]
            if not differing:
                continue
            take = rng.random(len(differing)) < self.swap_probability
            take[int(rng.integers(len(differing)))] = True
            changes = {t: v for (t, v), keep in zip(differing, take) if keep}
            note = f"from program {mate.id}: " + ", ".join(f"{t.name} {t.value}->{v}" for t, v in changes.items())
            return Proposal(self.name, with_values(context.parent.source, changes), note, mates=(mate.id,))
        return Proposal(self.name, None, "no other elite sets the parent's tunable constants differently")

"""Parent selection strategies: which elite of an island gets the next child.

Each strategy is a small class with one method, ``pick(elites, rng, layout,
occupied)``, over plain :class:`EliteCell` records (the archive builds them);
chosen in config (``selection=...``, one YAML per strategy under
``conf/selection/``).  ``layout`` (:mod:`evo.core.layouts`) says which cells are
adjacent.  The elites shown to an operator beside its parent are chosen the
same way by :mod:`evo.core.inspiration`.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from evo.core.descriptors import parse_cell_key
from evo.core.layouts import Layout


@dataclass(frozen=True)
class EliteCell:
    key: str
    program_id: int
    fitness: float
    children: int = 0  # children already derived from this elite (when the strategy asks for it)

    @cached_property
    def descriptors(self) -> dict[str, str]:
        return parse_cell_key(self.key)


class Selection(abc.ABC):
    name = "selection"
    needs_children = False  # whether the archive must count each elite's children (one more query)

    @abc.abstractmethod
    def pick(self, elites: list[EliteCell], rng: np.random.Generator, layout: Layout,
             occupied: set[str]) -> EliteCell:
        """One of ``elites`` (never empty); ``occupied`` holds the keys of all filled cells."""


def _weighted(elites: list[EliteCell], rng: np.random.Generator, weights: list[float]) -> EliteCell:
    p = np.asarray(weights, dtype=float)
    return elites[int(rng.choice(len(elites), p=p / p.sum()))]


class Uniform(Selection):
    """Every elite equally likely."""

    name = "uniform"

    def pick(self, elites, rng, layout, occupied):
        return elites[int(rng.integers(len(elites)))]


class FitnessProportional(Selection):
    """Weights grow with speedup and shrink with the children an elite already has.

    weight = speedup ** sharpness / (1 + children) ** novelty
    """

    name = "fitness_proportional"
    needs_children = True

    def __init__(self, *, sharpness: float = 2.0, novelty: float = 0.5):
        if sharpness < 0 or novelty < 0:
            raise ValueError("sharpness and novelty must be >= 0")
        self.sharpness, self.novelty = sharpness, novelty

    def pick(self, elites, rng, layout, occupied):
        return _weighted(elites, rng, [max(e.fitness, 1e-9) ** self.sharpness / (1 + e.children) ** self.novelty
                                       for e in elites])


class Tournament(Selection):
    """The fittest of ``size`` elites drawn at random."""

    name = "tournament"

    def __init__(self, *, size: int = 3):
        if size < 1:
            raise ValueError("tournament size must be >= 1")
        self.size = size

    def pick(self, elites, rng, layout, occupied):
        drawn = rng.choice(len(elites), size=min(self.size, len(elites)), replace=False)
        return max((elites[int(i)] for i in drawn), key=lambda e: e.fitness)


def empty_neighbours(cell: EliteCell, layout: Layout, occupied: set[str]) -> int:
    """Adjacent cells (one bin away along one descriptor, on a grid) that no elite holds yet."""
    return sum(key not in occupied for key in layout.neighbours(cell.key))


class Curiosity(Selection):
    """Prefer elites next to empty cells: children that step there fill the grid."""

    name = "curiosity"

    def __init__(self, *, strength: float = 1.0):
        if strength < 0:
            raise ValueError("strength must be >= 0")
        self.strength = strength

    def pick(self, elites, rng, layout, occupied):
        return _weighted(elites, rng, [1.0 + self.strength * empty_neighbours(e, layout, occupied)
                                       for e in elites])

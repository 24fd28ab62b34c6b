"""Inspiration strategies: which other elites an operator is shown beside its parent.

Like parent selection (:mod:`evo.core.selection`), each strategy is a small class
with one method, ``pick(elites, parent, k, rng, layout)``, over
:class:`~evo.core.selection.EliteCell` records; chosen in config
(``inspiration=...``, one YAML per strategy under ``conf/inspiration/``).
"""
from __future__ import annotations

import abc

import numpy as np

from evo.core.layouts import Layout
from evo.core.selection import EliteCell


class Inspiration(abc.ABC):
    name = "inspiration"

    @abc.abstractmethod
    def pick(self, elites: list[EliteCell], parent: str | None, k: int, rng: np.random.Generator,
             layout: Layout) -> list[EliteCell]:
        """Up to ``k`` of ``elites`` (the parent is not among them), in the order to show them.

        ``parent`` is the key of the parent's cell (None when unknown).
        """


def _by_fitness(elites: list[EliteCell]) -> list[EliteCell]:
    return sorted(elites, key=lambda e: e.fitness, reverse=True)


def _random(elites: list[EliteCell], k: int, rng: np.random.Generator) -> list[EliteCell]:
    if k <= 0 or not elites:
        return []
    return [elites[int(i)] for i in rng.choice(len(elites), size=min(k, len(elites)), replace=False)]


class BestThenRandom(Inspiration):
    """The fastest elite first, then random others: a target and some variety."""

    name = "best_then_random"

    def pick(self, elites, parent, k, rng, layout):
        ranked = _by_fitness(elites)
        if len(ranked) <= k:
            return ranked
        return [ranked[0], *_random(ranked[1:], k - 1, rng)][:k]


class Best(Inspiration):
    """The ``k`` fastest elites."""

    name = "best"

    def pick(self, elites, parent, k, rng, layout):
        return _by_fitness(elites)[:k]


class RandomElites(Inspiration):
    """``k`` elites drawn uniformly."""

    name = "random"

    def pick(self, elites, parent, k, rng, layout):
        return _random(elites, k, rng)


def _by_distance(elites: list[EliteCell], parent: str | None, rng: np.random.Generator, layout: Layout,
                 farthest: bool) -> list[EliteCell]:
    """Elites ordered by their cell's distance from the parent's (ties in random order)."""
    shuffled = [elites[int(i)] for i in rng.permutation(len(elites))]
    if parent is None:
        return shuffled
    return sorted(shuffled, key=lambda e: layout.distance(parent, e.key), reverse=farthest)


class Diverse(Inspiration):
    """Elites of the cells farthest from the parent's: other strategies to borrow from."""

    name = "diverse"

    def pick(self, elites, parent, k, rng, layout):
        return _by_distance(elites, parent, rng, layout, farthest=True)[:k]


class Neighbours(Inspiration):
    """Elites of the cells nearest to the parent's: small, related variations."""

    name = "neighbours"

    def pick(self, elites, parent, k, rng, layout):
        return _by_distance(elites, parent, rng, layout, farthest=False)[:k]

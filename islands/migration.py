"""Which islands send elites to which, when, and how (copied or moved).

A topology is a small strategy chosen in config (``topology=...``, one YAML per
implementation under ``conf/topology/``): ``pairs(count, rng)`` lists the
(source, destination) islands of one migration round.  The run loop hands it
an RNG derived from the run seed and the round's ordinal (:func:`round_rng`),
never a shared stream, so a resumed run migrates exactly as an uninterrupted one.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from evaluator.choices import check_choices

_MIGRATION_STREAM = 2_000_003  # keeps migration draws apart from the run loop's and the islands' streams


class Topology(abc.ABC):
    name = "topology"

    @abc.abstractmethod
    def pairs(self, count: int, rng: np.random.Generator) -> list[tuple[int, int]]:
        """(source, destination) islands of one round among ``count`` islands; none with fewer than two."""


@dataclass(frozen=True)
class Ring(Topology):
    """Island i sends to island i+1 (and the last to the first)."""

    name = "ring"

    def pairs(self, count, rng):
        if count < 2:
            return []
        return [(i, (i + 1) % count) for i in range(count)]


@dataclass(frozen=True)
class FullyConnected(Topology):
    """Every island sends to every other."""

    name = "fully_connected"

    def pairs(self, count, rng):
        return [(src, dst) for src in range(count) for dst in range(count) if src != dst]


@dataclass(frozen=True)
class RandomPartner(Topology):
    """Each island sends to one other island, drawn anew every round."""

    name = "random"

    def pairs(self, count, rng):
        if count < 2:
            return []
        return [(src, (src + 1 + int(rng.integers(count - 1))) % count) for src in range(count)]


def round_rng(seed: int, ordinal: int) -> np.random.Generator:
    """The draws of the migration round at ``ordinal`` (the child evaluations done when it runs)."""
    return np.random.default_rng([seed, _MIGRATION_STREAM, ordinal])


@dataclass(frozen=True)
class MigrationSettings:
    interval: int = 16  # child evaluations between migrations (0: never)
    migrants: int = 1   # elites each island sends per task
    topology: Topology = field(default_factory=Ring)
    mode: Literal["copy", "move"] = "copy"  # copy: the elite stays on its island too; move: it leaves it
    reseed_after: int = 0  # child evaluations of a task on an island without a new best before reseeding (0: never)

    def __post_init__(self):
        if self.interval < 0 or self.migrants < 1:
            raise ValueError("islands.migration.interval must be >= 0 and migrants >= 1")
        check_choices(self, "islands.migration")
        if self.reseed_after < 0:
            raise ValueError("islands.migration.reseed_after must be >= 0 (0: never reseed)")
        if not isinstance(self.topology, Topology):
            raise ValueError(f"islands.migration.topology must be a Topology, not {type(self.topology).__name__}")

    def due(self, evaluations_before: int, evaluations_after: int) -> bool:
        """True when an interval boundary was crossed."""
        if self.interval == 0:
            return False
        return evaluations_after // self.interval > evaluations_before // self.interval


def migration_round(archive, migration: MigrationSettings, islands: int, seed: int, ordinal: int,
                    tasks: list[str]) -> dict:
    """One migration round over ``tasks`` in ``archive`` (an ``archive.Archive``): what the run's events
    record of it.  Its draws depend on the run seed and the round's ordinal only, so a resume draws the same."""
    pairs = migration.topology.pairs(islands, round_rng(seed, ordinal))
    moved = sum(archive.migrate(task, pairs, migration.migrants, move=migration.mode == "move") for task in tasks)
    return {"moved": moved, "topology": migration.topology.name, "mode": migration.mode, "pairs": pairs,
            "ordinal": ordinal}

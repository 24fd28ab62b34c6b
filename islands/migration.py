"""Which islands send elites to which, and when."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MigrationSettings:
    interval: int = 16  # child evaluations between migrations (0: never)
    migrants: int = 1   # elites each island sends per task

    def __post_init__(self):
        if self.interval < 0 or self.migrants < 1:
            raise ValueError("islands.migration.interval must be >= 0 and migrants >= 1")

    def due(self, evaluations_before: int, evaluations_after: int) -> bool:
        """True when an interval boundary was crossed."""
        if self.interval == 0:
            return False
        return evaluations_after // self.interval > evaluations_before // self.interval


def ring(count: int) -> list[tuple[int, int]]:
    """Island i sends to island i+1 (and the last to the first)."""
    if count < 2:
        return []
    return [(i, (i + 1) % count) for i in range(count)]

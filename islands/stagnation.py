"""When an island has stopped improving on a task, so it can be reseeded from the others.

An island is stagnant on a task when its last ``after`` child evaluations of the
task found no new best: none was correct and faster than the best before it by
more than its own measurement noise (the archive's elite rule).  The best starts
from the task's seeds and, after a reseed, from the elites the island received.

The state is derived from the archive: :meth:`Stagnation.replay` rebuilds it
from the run's evaluations in the order they were recorded and from the reseeds
saved (in ``meta``, by the transaction that reseeded), and the run loop feeds
each new evaluation to the same rule, so a resumed run reseeds where an
uninterrupted one would.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

RESEEDS_META = "migration.reseeds"  # task -> island -> [child evaluations there at the reseed, best after it]


@dataclass
class _Island:
    best: float | None
    evaluations: int = 0  # child evaluations of the task on the island
    since: int = 0        # the value of ``evaluations`` at the last new best or reseed


class Stagnation:
    def __init__(self, after: int, reseeds: dict[str, dict[str, list]] | None = None):
        """``after`` child evaluations without a new best make an island stagnant (0: never)."""
        self.after = after
        self.reseeds = reseeds or {}
        self._seed_best: dict[str, float] = {}
        self._islands: dict[tuple[str, int], _Island] = {}

    @classmethod
    def of_run(cls, archive, tasks: list[str], after: int, islands: int) -> "Stagnation":
        """A run's stagnation at its start: replayed from its archive where reseeding is on (``after``
        > 0, several islands), else one that never finds an island stagnant."""
        if after <= 0 or islands < 2:
            return cls(0)
        return cls.replay(after, archive.evaluation_outcomes(tasks), archive.get_meta(RESEEDS_META))

    @classmethod
    def replay(cls, after: int, outcomes, reseeds_json: str | None) -> "Stagnation":
        """The state after ``outcomes`` (``Archive.evaluation_outcomes``) and the saved reseeds."""
        stagnation = cls(after, json.loads(reseeds_json) if reseeds_json else {})
        for task, island, is_seed, speedup, noise in outcomes:
            if is_seed:
                stagnation.seeded(task, speedup)
                continue
            stagnation.evaluated(task, island, speedup, noise)
            state = stagnation._islands[(task, island)]
            mark = stagnation.reseeds.get(task, {}).get(str(island))
            if mark is not None and mark[0] == state.evaluations:
                state.best, state.since = mark[1], state.evaluations
        return stagnation

    def seeded(self, task: str, speedup: float | None) -> None:
        """A seed of ``task`` was evaluated (``speedup``: None unless correct): every island starts from it."""
        if speedup is None:
            return
        self._seed_best[task] = max(self._seed_best.get(task, speedup), speedup)
        for (name, _), state in self._islands.items():
            if name == task and (state.best is None or speedup > state.best):
                state.best = speedup

    def evaluated(self, task: str, island: int, speedup: float | None, noise: float | None) -> bool:
        """Count a child's evaluation (``speedup``: None unless correct); True when the island is stagnant."""
        state = self._islands.get((task, island))
        if state is None:
            state = self._islands[(task, island)] = _Island(best=self._seed_best.get(task))
        state.evaluations += 1
        if speedup is not None and (state.best is None or speedup > state.best * (1.0 + max(noise or 0.0, 0.0))):
            state.best, state.since = speedup, state.evaluations
        return self.after > 0 and state.evaluations - state.since >= self.after

    def stagnant(self) -> list[tuple[str, int]]:
        """(task, island) pairs due for a reseed (after a resume, those a crash left unreseeded)."""
        if self.after <= 0:
            return []
        return sorted(key for key, state in self._islands.items() if state.evaluations - state.since >= self.after)

    def reseed_meta(self, task: str, island: int, best: float) -> dict[str, str]:
        """The ``meta`` entry that records a reseed of the island with elites up to ``best``; written
        by the reseed's own transaction, then applied here with :meth:`reseeded`."""
        reseeds = {name: dict(marks) for name, marks in self.reseeds.items()}
        reseeds.setdefault(task, {})[str(island)] = [self._islands[(task, island)].evaluations, best]
        return {RESEEDS_META: json.dumps(reseeds, sort_keys=True)}

    def reseeded(self, task: str, island: int, meta: dict[str, str]) -> None:
        """Apply a reseed once its transaction (which wrote ``meta``) has committed."""
        self.reseeds = json.loads(meta[RESEEDS_META])
        state = self._islands[(task, island)]
        state.best, state.since = self.reseeds[task][str(island)][1], state.evaluations

    def evaluations_since_best(self, task: str, island: int) -> int:
        state = self._islands.get((task, island))
        return 0 if state is None else state.evaluations - state.since

    def reseed(self, archive, task: str, island: int, islands: int) -> dict | None:
        """Replace the stagnant ``island``'s elites of ``task`` in ``archive`` (an ``archive.Archive``)
        with the other islands' best ones, in one transaction with the record of it: what the run's
        events record, or None when no other island has an elite yet (tried again after the island's
        next evaluation)."""
        others = [archive.qd_figures(task, i)["best_speedup"] for i in range(islands) if i != island]
        if not any(best is not None for best in others):
            return None
        stagnant_for = self.evaluations_since_best(task, island)
        meta = self.reseed_meta(task, island, max(best for best in others if best is not None))
        elites = archive.reseed(task, island, meta)
        self.reseeded(task, island, meta)
        return {"elites": elites, "stagnant_for": stagnant_for}

"""Elites passing between islands: migration rounds and the reseeding of a stagnant island.

:class:`Exchange` is a mixin of :class:`archive.store.Archive`: it changes cells
through the store's ``_write`` transaction, ``_place`` (the elite rule),
``_cell`` and ``_empty``, so a round that fills a cell twice sees its own changes.
Every elite placed gets a ``migrations`` row saying its kind: ``copy``,
``move`` or ``reseed``.
"""
from __future__ import annotations

import time

from sqlalchemy import select

from archive import statements as sql
from archive.outcomes import Insert
from evaluator.result import Status
from evo.core.program import SEED_OPERATORS


class Exchange:
    def migrate(self, task: str, pairs: list[tuple[int, int]], count: int, *, move: bool = False) -> int:
        """One round, one transaction: over each (source, destination) pair in turn, the ``count`` best
        elites the source held when the round began go to the destination's cells (if better there).

        ``move``: an elite the destination accepted leaves its source cell, unless the round has
        already put another elite there (so a ring of moves rotates elites).  Returns how many were placed.
        """
        kind, placed = ("move" if move else "copy"), 0
        if not pairs:
            return placed
        with self._write() as c:
            held = self._task_cells(c, task)
            senders = {src: sorted(((key, pid, fitness) for (island, key), (pid, fitness) in held.items()
                                    if island == src), key=lambda cell: cell[2], reverse=True)[:count]
                       for src in dict.fromkeys(src for src, _ in pairs)}
            for src, dst in pairs:
                for key, program_id, fitness in senders[src]:
                    if self._place(c, task, dst, program_id, key, fitness) is Insert.NOT_ADDED:
                        continue
                    self._record_migration(c, program_id, task, src, dst, kind)
                    placed += 1
                    if move and (self._cell(c, task, src, key) or (None,))[0] == program_id:
                        self._empty(c, task, src, key)
        return placed

    def reseed(self, task: str, island: int, meta: dict[str, str] | None = None) -> int:
        """Empty the island's cells of ``task`` and fill them with the other islands' best elite of
        each cell (copies); ``meta`` is written in the same transaction.

        Returns how many elites it received; 0 (nothing changed) when no other island holds one.
        """
        with self._write() as c:
            best: dict[str, tuple[int, int, float]] = {}  # key -> (source island, program, fitness)
            for (src, key), (program_id, fitness) in self._task_cells(c, task).items():
                if src != island and (key not in best or fitness > best[key][2]):
                    best[key] = (src, program_id, fitness)
            if not best:
                return 0
            for src, key in [cell for cell in self._task_cells(c, task) if cell[0] == island]:
                self._empty(c, task, src, key)
            for key, (src, program_id, fitness) in sorted(best.items()):
                self._place(c, task, island, program_id, key, fitness)
                self._record_migration(c, program_id, task, src, island, "reseed")
            self._set_meta(c, meta or {})
        return len(best)

    @staticmethod
    def _record_migration(c, program_id: int, task: str, src: int, dst: int, kind: str) -> None:
        c.execute(sql.INSERT_MIGRATION, dict(program_id=program_id, task=task, src_island=src, dst_island=dst,
                                             kind=kind, created_at=time.time()))

    def evaluation_outcomes(self, tasks: list[str]) -> list[tuple[str, int, bool, float | None, float | None]]:
        """(task, island, is_seed, speedup if correct, its noise) of every evaluation of ``tasks``, in the
        order they were recorded: what stagnation is derived from on resume."""
        P, E = sql.PROGRAMS.c, sql.EVALUATIONS.c
        with self._tx() as c:
            rows = c.execute(select(P.task, P.island, P.operator, E.status, E.speedup, E.speedup_noise)
                             .join(sql.PROGRAMS, P.id == E.program_id).where(P.task.in_(tasks))
                             .order_by(E.id)).all()
        return [(task, island, operator in SEED_OPERATORS,
                 speedup if status == Status.CORRECT.value else None, noise)
                for task, island, operator, status, speedup, noise in rows]

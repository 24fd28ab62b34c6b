"""What the archive reports about a run: QD figures and their history, evaluation counts, LLM spend.

:class:`Statistics` is a mixin of :class:`archive.store.Archive`; it reads through the
archive's ``_tx`` (one transaction on its connection) and ``_elite_cells`` (the cached cells),
and measures coverage against its ``layout``.  It also stores the LLM requests, the rows
``llm_spend`` adds up, and the children rejected as near-duplicates.
"""
from __future__ import annotations

import time

from sqlalchemy import func, insert, select

from archive import statements as sql
from evaluator.result import Status
from evo.core.program import SEED_OPERATORS


class Statistics:
    def stats(self, task: str) -> dict:
        """Counts and quality-diversity figures of one task over all islands."""
        P, E = sql.PROGRAMS.c, sql.EVALUATIONS.c
        with self._tx() as c:
            programs = c.scalar(select(func.count()).select_from(sql.PROGRAMS).where(P.task == task))
            by_status = dict(c.execute(select(E.status, func.count()).join(sql.PROGRAMS, P.id == E.program_id)
                                       .where(P.task == task).group_by(E.status)).all())
            seed_speedup = c.scalar(select(func.max(E.speedup)).join(sql.PROGRAMS, P.id == E.program_id)
                                    .where(P.task == task, P.operator.in_(SEED_OPERATORS),
                                           E.status == Status.CORRECT.value))
        return {
            "programs": programs,
            "evaluations": sum(by_status.values()),
            "correct": by_status.get(Status.CORRECT.value, 0),
            "by_status": by_status,
            "seed_speedup": seed_speedup,
            **self.qd_figures(task),
        }

    def qd_figures(self, task: str, island: int | None = None) -> dict:
        """Cells, coverage, QD-score (sum of elite speedups) and best, of one island or all."""
        with self._tx() as c:
            fitness = [f for _, _, f in self._elite_cells(c, task, island)]
        return {"cells": len(fitness), "coverage": len(fitness) / self.layout.size,
                "qd_score": float(sum(fitness)), "best_speedup": max(fitness) if fitness else None}

    def record_stats(self, tasks: list[str], islands: int, children_done: int) -> None:
        """Append each task's figures, per island and over all (island -1), to the history (one transaction)."""
        now = time.time()
        rows = [dict(self.qd_figures(task, island), task=task, island=-1 if island is None else island,
                     children_done=children_done, created_at=now)
                for task in tasks for island in (None, *range(islands))]
        if rows:
            with self._tx() as c:
                c.execute(insert(sql.STATS), rows)

    def stats_history(self, task: str, island: int = -1) -> list[dict]:
        with self._tx() as c:
            rows = c.execute(select(sql.STATS).where(sql.STATS.c.task == task, sql.STATS.c.island == island)
                             .order_by(sql.STATS.c.id)).mappings().all()
        return [dict(r) for r in rows]

    def child_evaluation_count(self) -> int:
        """Evaluations of programs the search made (seeds excluded): the budget's unit."""
        seeds = select(sql.PROGRAMS.c.id).where(sql.PROGRAMS.c.operator.in_(SEED_OPERATORS))
        with self._tx() as c:
            # All evaluations minus the seeds' (few, found through the operator index).
            total = c.scalar(select(func.count()).select_from(sql.EVALUATIONS))
            of_seeds = c.scalar(select(func.count()).select_from(sql.EVALUATIONS)
                                .where(sql.EVALUATIONS.c.program_id.in_(seeds)))
            return total - of_seeds

    def child_evaluation_counts(self) -> dict[str, int]:
        """Evaluations of programs the search made, per task (run.budget.per_task's unit)."""
        P, E = sql.PROGRAMS.c, sql.EVALUATIONS.c
        with self._tx() as c:
            return dict(c.execute(select(P.task, func.count())
                                  .select_from(sql.EVALUATIONS.join(sql.PROGRAMS, P.id == E.program_id))
                                  .where(P.operator.not_in(SEED_OPERATORS)).group_by(P.task)).all())

    def record_llm_calls(self, calls: list[dict], *, task: str, island: int, operator: str,
                         program_id: int | None) -> None:
        """One row per request attempt (``program_id``: the program it made, if any)."""
        if calls:
            with self._tx() as c:
                self._insert_llm_calls(c, calls, task=task, island=island, operator=operator, program_id=program_id)

    def record_rejection(self, *, task: str, island: int, operator: str, resembles: int, similarity: float,
                         measure: str, llm_calls: list[dict] = ()) -> None:
        """A child not evaluated, a near-duplicate of program ``resembles`` (``evo.core.novelty``), with
        the requests that made it: one transaction."""
        with self._tx() as c:
            self._insert_llm_calls(c, llm_calls, task=task, island=island, operator=operator, program_id=None)
            c.execute(insert(sql.REJECTIONS).values(task=task, island=island, operator=operator, resembles=resembles,
                                                    similarity=similarity, measure=measure, created_at=time.time()))

    _LLM_CALL_COLUMNS = frozenset(sql.LLM_CALLS.columns.keys())

    def _insert_llm_calls(self, c, calls: list[dict], **fields) -> None:
        now = time.time()
        for call in calls:
            c.execute(sql.INSERT_LLM_CALL, dict({k: v for k, v in call.items() if k in self._LLM_CALL_COLUMNS},
                                                **fields, created_at=now))

    def llm_spend(self) -> dict:
        L = sql.LLM_CALLS.c
        with self._tx() as c:
            calls, cost, errors, tokens = c.execute(select(
                func.count(L.id), func.coalesce(func.sum(L.cost_usd), 0.0),
                func.count(L.id).filter(L.error != ""),
                func.coalesce(func.sum(L.prompt_tokens + L.completion_tokens), 0))).one()
        return {"calls": calls, "cost_usd": float(cost), "errors": errors, "tokens": int(tokens)}

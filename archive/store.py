"""The archive: every program and evaluation of a run, and the MAP-Elites grid.

One :class:`Archive` owns the database; each state change is one
transaction.  SQLite runs in WAL mode; any SQLAlchemy URL works.
"""
from __future__ import annotations

import enum
import time

import numpy as np
from sqlalchemy import create_engine, event, func, select
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from archive.descriptors import DEFAULT_DESCRIPTORS, cell_key, describe, grid_size
from archive.models import (
    SCHEMA_VERSION, Base, CellRow, EvaluationRow, LineageRow, LLMCallRow, MetaRow, MigrationRow, ProgramRow,
)
from evaluator.result import EvalResult, Status
from evo.errors import EvoError
from evo.kernel_source import normalized_hash
from evo.program import Program


class ArchiveError(EvoError):
    """The archive database cannot be used."""


class Insert(str, enum.Enum):
    NEW_CELL = "new_cell"
    IMPROVED = "improved"
    NOT_ADDED = "not_added"


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


class Archive:
    """Programs, evaluations, lineage and per-(task, island) MAP-Elites cells."""

    def __init__(self, url: str, *, descriptors=DEFAULT_DESCRIPTORS):
        self.url = url
        self.descriptors = tuple(descriptors)
        self.engine = create_engine(url)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        try:
            Base.metadata.create_all(self.engine)
            version = self.get_meta("schema_version")
            if version is None:
                self.set_meta("schema_version", str(SCHEMA_VERSION))
            elif int(version) > SCHEMA_VERSION:
                raise ArchiveError(
                    f"archive {url} has schema version {version}, newer than this engine's "
                    f"{SCHEMA_VERSION}: upgrade the engine to open it"
                )
        except (DatabaseError, OperationalError) as exc:
            raise ArchiveError(f"cannot open archive {url}: {exc.orig}") from exc

    def close(self) -> None:
        self.engine.dispose()

    # -- run metadata -------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        with self._session() as s:
            row = s.get(MetaRow, key)
            return row.value if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._session.begin() as s:
            s.merge(MetaRow(key=key, value=value))

    # -- programs -----------------------------------------------------------
    def add_program(self, *, task: str, island: int, generation: int, operator: str, source: str,
                    parent_ids=(), inspiration_ids=()) -> Program:
        with self._session.begin() as s:
            row = ProgramRow(task=task, island=island, generation=generation, operator=operator,
                             source=source, source_hash=normalized_hash(source), created_at=time.time())
            s.add(row)
            s.flush()
            for role, ids in (("parent", parent_ids), ("inspiration", inspiration_ids)):
                for pid in dict.fromkeys(ids):
                    s.add(LineageRow(child_id=row.id, parent_id=pid, role=role))
        return Program(id=row.id, task=task, island=island, generation=generation, operator=operator,
                       source=source, parent_ids=tuple(parent_ids), inspiration_ids=tuple(inspiration_ids))

    def find_duplicate(self, task: str, source: str) -> int | None:
        """Id of an archived program of ``task`` with the same normalised source."""
        with self._session() as s:
            return s.scalar(select(ProgramRow.id).where(
                ProgramRow.task == task, ProgramRow.source_hash == normalized_hash(source)).limit(1))

    def record_evaluation(self, program: Program, result: EvalResult) -> Insert:
        """Store the result and, if correct and best in its cell, make it the elite."""
        program.result = result
        program.descriptors = describe(program.source, self.descriptors)
        fields = result.to_dict()
        fields.pop("extra", None)
        with self._session.begin() as s:
            s.add(EvaluationRow(program_id=program.id, created_at=time.time(), **fields))
            if not result.correct or result.speedup is None:
                return Insert.NOT_ADDED
            return self._place(s, program.task, program.island, program.id,
                               cell_key(program.descriptors), result.speedup)

    @staticmethod
    def _place(s: Session, task: str, island: int, program_id: int, key: str, fitness: float) -> Insert:
        cell = s.get(CellRow, (task, island, key))
        if cell is None:
            s.add(CellRow(task=task, island=island, key=key, program_id=program_id, fitness=fitness,
                          updated_at=time.time()))
            return Insert.NEW_CELL
        if fitness > cell.fitness:
            cell.program_id, cell.fitness, cell.updated_at = program_id, fitness, time.time()
            return Insert.IMPROVED
        return Insert.NOT_ADDED

    def pending(self) -> list[Program]:
        """Programs with no evaluation yet: in flight when the run stopped."""
        with self._session() as s:
            evaluated = select(EvaluationRow.program_id)
            rows = s.scalars(select(ProgramRow).where(ProgramRow.id.not_in(evaluated))
                             .order_by(ProgramRow.id)).all()
            return [self._program(s, r, with_result=False) for r in rows]

    def get(self, program_id: int) -> Program:
        with self._session() as s:
            return self._program(s, s.get(ProgramRow, program_id))

    def _program(self, s: Session, row: ProgramRow, with_result: bool = True) -> Program:
        lineage = s.execute(select(LineageRow.parent_id, LineageRow.role)
                            .where(LineageRow.child_id == row.id)).all()
        result = None
        if with_result:
            ev = s.scalars(select(EvaluationRow).where(EvaluationRow.program_id == row.id)
                           .order_by(EvaluationRow.id.desc()).limit(1)).first()
            if ev is not None:
                result = EvalResult.from_dict({c: getattr(ev, c) for c in EvalResult.__dataclass_fields__
                                               if hasattr(ev, c)})
        return Program(
            id=row.id, task=row.task, island=row.island, generation=row.generation, operator=row.operator,
            source=row.source, result=result,
            parent_ids=tuple(p for p, role in lineage if role == "parent"),
            inspiration_ids=tuple(p for p, role in lineage if role == "inspiration"),
            descriptors=describe(row.source, self.descriptors),
        )

    # -- elites and sampling --------------------------------------------------
    def elites(self, task: str, island: int | None = None) -> list[Program]:
        """Elites of a task's cells (on one island, or the best per cell over all islands)."""
        with self._session() as s:
            query = select(CellRow).where(CellRow.task == task)
            if island is not None:
                query = query.where(CellRow.island == island)
            best: dict[str, CellRow] = {}
            for cell in s.scalars(query.order_by(CellRow.island, CellRow.key)):
                if cell.key not in best or cell.fitness > best[cell.key].fitness:
                    best[cell.key] = cell
            return [self._program(s, s.get(ProgramRow, c.program_id)) for c in best.values()]

    def sample_parent(self, task: str, island: int, rng: np.random.Generator) -> Program | None:
        """A parent drawn uniformly from the island's elites (any island's if it has none)."""
        pool = self.elites(task, island) or self.elites(task)
        if not pool:
            return None
        return pool[int(rng.integers(len(pool)))]

    def inspirations(self, task: str, exclude: int, k: int, rng: np.random.Generator) -> list[Program]:
        """Up to ``k`` other elites of the task: the best first, then random ones."""
        pool = [p for p in self.elites(task) if p.id != exclude]
        if len(pool) <= k:
            return pool
        pool.sort(key=lambda p: p.fitness or 0.0, reverse=True)
        rest = pool[1:]
        picks = rng.choice(len(rest), size=k - 1, replace=False) if k > 1 else []
        return [pool[0], *(rest[int(i)] for i in picks)]

    def migrate(self, task: str, src_island: int, dst_island: int, count: int) -> int:
        """Copy the ``count`` best elites of one island into another's cells; returns how many moved in."""
        moved = 0
        with self._session.begin() as s:
            cells = s.scalars(select(CellRow).where(CellRow.task == task, CellRow.island == src_island)
                              .order_by(CellRow.fitness.desc()).limit(count)).all()
            for cell in cells:
                if self._place(s, task, dst_island, cell.program_id, cell.key, cell.fitness) is not Insert.NOT_ADDED:
                    s.add(MigrationRow(program_id=cell.program_id, task=task, src_island=src_island,
                                       dst_island=dst_island, created_at=time.time()))
                    moved += 1
        return moved

    # -- statistics -----------------------------------------------------------
    def stats(self, task: str) -> dict:
        """Counts and quality-diversity figures of one task over all islands."""
        with self._session() as s:
            programs = s.scalar(select(func.count()).select_from(ProgramRow).where(ProgramRow.task == task))
            evals = s.execute(
                select(EvaluationRow.status, func.count()).join(ProgramRow, ProgramRow.id == EvaluationRow.program_id)
                .where(ProgramRow.task == task).group_by(EvaluationRow.status)).all()
            seed_speedup = s.scalar(
                select(func.max(EvaluationRow.speedup)).join(ProgramRow, ProgramRow.id == EvaluationRow.program_id)
                .where(ProgramRow.task == task, ProgramRow.operator == "seed",
                       EvaluationRow.status == Status.CORRECT.value))
        by_status = dict(evals)
        elites = self.elites(task)
        fitness = [p.fitness for p in elites if p.fitness is not None]
        return {
            "programs": programs,
            "evaluations": sum(by_status.values()),
            "correct": by_status.get(Status.CORRECT.value, 0),
            "by_status": by_status,
            "best_speedup": max(fitness) if fitness else None,
            "seed_speedup": seed_speedup,
            "cells": len(elites),
            "coverage": len(elites) / grid_size(self.descriptors),
            "qd_score": float(sum(fitness)),
        }

    def child_evaluation_count(self) -> int:
        """Evaluations of programs the search made (seeds excluded): the budget's unit."""
        with self._session() as s:
            return s.scalar(select(func.count()).select_from(EvaluationRow)
                            .join(ProgramRow, ProgramRow.id == EvaluationRow.program_id)
                            .where(ProgramRow.operator != "seed"))

    def has_programs(self, task: str) -> bool:
        with self._session() as s:
            return s.scalar(select(ProgramRow.id).where(ProgramRow.task == task).limit(1)) is not None

    def record_llm_calls(self, calls: list[dict], *, task: str, island: int, operator: str,
                         program_id: int | None) -> None:
        if not calls:
            return
        known = set(LLMCallRow.__table__.columns.keys())
        with self._session.begin() as s:
            for call in calls:
                fields = {k: v for k, v in call.items() if k in known}
                s.add(LLMCallRow(task=task, island=island, operator=operator, program_id=program_id,
                                 created_at=time.time(), **fields))

    def llm_spend(self) -> dict:
        with self._session() as s:
            calls, cost, errors = s.execute(select(
                func.count(LLMCallRow.id), func.coalesce(func.sum(LLMCallRow.cost_usd), 0.0),
                func.count(LLMCallRow.id).filter(LLMCallRow.error != ""))).one()
        return {"calls": calls, "cost_usd": float(cost), "errors": errors}

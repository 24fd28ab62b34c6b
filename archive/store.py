"""The archive: every program and evaluation of a run, and the MAP-Elites grid.

One :class:`Archive` owns the database; each state change is one
transaction.  SQLite runs in WAL mode; any SQLAlchemy URL works.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections import OrderedDict

import numpy as np
from sqlalchemy import func, insert, select
from sqlalchemy.exc import DatabaseError, OperationalError

from archive import statements as sql
from archive.centroids import load_or_draw_centroids
from archive.environments import environment_id, environment_row
from archive.evaluation_rows import PROFILE_FIELDS, profile_extra, shape_timing_row
from archive.exchange import Exchange
from archive.outcomes import Insert
from archive.schema import SchemaError, make_engine, upgrade
from archive.statistics import Statistics
from evaluator.result import EvalResult
from evo.core.descriptors import DEFAULT_DESCRIPTORS, analyse, cell_key, complete, describe, parse_cell_key
from evo.core.errors import EvoError
from evo.core.inspiration import BestThenRandom, Inspiration
from evo.core.kernel_source import normalized_hash
from evo.core.layouts import Grid, Layout
from evo.core.program import Program
from evo.core.selection import EliteCell, Selection, Uniform

UNIFORM = Uniform()
BEST_THEN_RANDOM = BestThenRandom()
_PROGRAM_CACHE_SIZE = 4096


class ArchiveError(EvoError):
    """The archive database cannot be used."""


class Archive(Exchange, Statistics):
    """Programs, evaluations, lineage and per-(task, island) MAP-Elites cells.

    Hot paths (inserts, sampling) use SQLAlchemy Core statements: one
    short transaction each, no ORM unit of work.  Migration and reseeding
    (:class:`archive.exchange.Exchange`) and the statistics and LLM spend
    (:class:`archive.statistics.Statistics`) are mixins over the same connection.
    """

    def __init__(self, url: str, *, descriptors=DEFAULT_DESCRIPTORS, cvt_cells: int = 0, seed: int = 0,
                 busy_timeout_s: float = 10.0, engine_version: str = "unknown"):
        """``cvt_cells`` > 0: a CVT archive of that many cells over continuous ``descriptors``,
        its centroids drawn from ``seed`` when the database has none yet; 0: a grid of their bins."""
        self.url = url
        self.descriptors = tuple(descriptors)
        self.layout: Layout = Grid(self.descriptors)
        # One owner, one connection: no pool checkout and reset around every short transaction.
        self.engine = make_engine(url, busy_timeout_s=busy_timeout_s)
        self._conn = None
        # Write-through caches, coherent because this object is the database's only writer:
        # the cells of each task, and evaluated programs (immutable once evaluated).
        self._cells: dict[str, dict[tuple[int, str], tuple[int, float]]] = {}
        # Cell changes of the open write transaction, (task, island, key) -> (program_id, fitness), or
        # None for an emptied cell: read before the cache, so one transaction may change a cell twice.
        self._staged: dict[tuple[str, int, str], tuple[int, float] | None] = {}
        self._evaluated: OrderedDict[int, Program] = OrderedDict()
        self._environments: dict[tuple, int] = {}  # environment -> its row id
        self.engine_version = engine_version
        try:
            upgrade(url, busy_timeout_s=busy_timeout_s)
        except SchemaError as exc:
            raise ArchiveError(f"archive {url} has {exc}: upgrade the engine to open it; "
                               "the database was left as it was") from None
        except (DatabaseError, OperationalError) as exc:
            raise ArchiveError(f"cannot open archive {url}: {exc.orig}; the database was left as it was") from exc
        try:
            with self._tx() as c:
                self.layout = load_or_draw_centroids(c, self.descriptors, cvt_cells, seed) or self.layout
        except ValueError as exc:
            raise ArchiveError(f"archive {url}: {exc}") from None

    @contextlib.contextmanager
    def _tx(self):
        """One transaction on the archive's connection (reads too, so no snapshot stays open)."""
        try:
            if self._conn is None:
                self._conn = self.engine.connect()
            with self._conn.begin():
                yield self._conn
        except (DatabaseError, OperationalError) as exc:  # locked, full disk, corrupted page, ...
            raise ArchiveError(f"archive {self.url}: {exc.orig}; the transaction was rolled back") from exc

    @contextlib.contextmanager
    def _write(self):
        """A write transaction; cell changes reach the cache only once it has committed."""
        self._staged.clear()
        try:
            with self._tx() as c:
                yield c
        except BaseException:
            self._staged.clear()
            raise
        for (task, island, key), elite in self._staged.items():
            if task in self._cells:
                if elite is None:
                    self._cells[task].pop((island, key), None)
                else:
                    self._cells[task][(island, key)] = elite
        self._staged.clear()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._cells, self._evaluated = {}, OrderedDict()
        self.engine.dispose()

    # -- run metadata -------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        with self._tx() as c:
            return c.scalar(select(sql.META.c.value).where(sql.META.c.key == key))

    def set_meta(self, key: str, value: str) -> None:
        with self._tx() as c:
            self._set_meta(c, {key: value})

    @staticmethod
    def _set_meta(c, meta: dict[str, str]) -> None:
        for key, value in meta.items():
            if c.execute(sql.UPDATE_META, dict(k=key, v=value)).rowcount == 0:
                c.execute(insert(sql.META).values(key=key, value=value))

    # -- programs -----------------------------------------------------------
    def add_program(self, *, task: str, island: int, generation: int, operator: str, source: str,
                    parent_ids=(), inspiration_ids=(), source_hash: str | None = None,
                    descriptors: dict[str, str] | None = None, meta: dict[str, str] | None = None,
                    llm_calls: list[dict] = ()) -> Program:
        """Store a new program; ``source_hash`` and ``descriptors`` are computed here when not given.

        ``meta`` entries (the run loop's RNG state) and ``llm_calls`` (the requests that made the
        program, as :meth:`record_llm_calls` takes them) are written in the same transaction.
        """
        if not source_hash or not descriptors:
            computed_hash, computed = analyse(source, self.descriptors)  # one parse for both
            source_hash, descriptors = source_hash or computed_hash, descriptors or computed
        with self._tx() as c:
            pid = c.execute(sql.INSERT_PROGRAM, dict(
                task=task, island=island, generation=generation, operator=operator, source=source,
                source_hash=source_hash, cell_key=cell_key(descriptors), created_at=time.time())
            ).inserted_primary_key[0]
            links = [dict(child_id=pid, parent_id=p, role=role)
                     for role, ids in (("parent", parent_ids), ("inspiration", inspiration_ids))
                     for p in dict.fromkeys(ids)]
            if links:
                c.execute(sql.INSERT_LINEAGE, links)
            self._insert_llm_calls(c, llm_calls, task=task, island=island, operator=operator, program_id=pid)
            self._set_meta(c, meta or {})
        return Program(id=pid, task=task, island=island, generation=generation, operator=operator,
                       source=source, parent_ids=tuple(parent_ids), inspiration_ids=tuple(inspiration_ids),
                       source_hash=source_hash, descriptors=descriptors)

    def find_duplicate(self, task: str, source: str, source_hash: str | None = None) -> int | None:
        """Id of an archived program of ``task`` with the same normalised source."""
        with self._tx() as c:
            return c.scalar(sql.FIND_HASH, dict(t=task, h=source_hash or normalized_hash(source)))

    def sources_after(self, task: str, after: int = 0) -> list[tuple[int, str]]:
        """(id, source) of the programs of ``task`` with an id above ``after``, oldest first."""
        with self._tx() as c:
            return [tuple(row) for row in c.execute(sql.SOURCES_AFTER, dict(t=task, after=after))]

    # -- tasks set aside -----------------------------------------------------
    def set_aside(self, task: str, stage: str, reason: str, source_hash: str) -> None:
        """Record that ``task`` is not searched, at which stage and why (replacing an earlier record)."""
        with self._write() as c:
            c.execute(sql.SET_ASIDE.delete().where(sql.SET_ASIDE.c.task == task))
            c.execute(sql.SET_ASIDE.insert().values(task=task, stage=stage, reason=reason,
                                                    source_hash=source_hash, created_at=time.time()))

    def readmit(self, task: str) -> None:
        """``task`` is searched again (its problem file changed, say)."""
        with self._write() as c:
            c.execute(sql.SET_ASIDE.delete().where(sql.SET_ASIDE.c.task == task))

    def set_aside_tasks(self) -> dict[str, dict]:
        """task -> {stage, reason, source_hash, created_at} of every task set aside."""
        with self._tx() as c:
            return {r["task"]: dict(r) for r in c.execute(select(sql.SET_ASIDE)).mappings()}

    def has_programs(self, task: str) -> bool:
        with self._tx() as c:
            return c.scalar(select(sql.PROGRAMS.c.id).where(sql.PROGRAMS.c.task == task).limit(1)) is not None

    def record_evaluation(self, program: Program, result: EvalResult, meta: dict[str, str] | None = None) -> Insert:
        """Store the result and, if correct and best in its cell beyond the noise, make it the elite.

        The program's cell is completed with the measured descriptors (if any)
        and stored with it.  An occupied cell changes hands only when the
        challenger is faster than its elite by more than the challenger's
        relative measurement noise (``speedup > elite * (1 + speedup_noise)``;
        no noise figure: any gain), so noise alone does not churn the archive.
        ``meta`` entries are written in the same transaction.
        """
        program.result = result
        known = program.descriptors or describe(program.source, self.descriptors)
        key = self.layout.key(complete(known, result, self.descriptors))
        program.descriptors = parse_cell_key(key)
        fields = result.to_dict()
        extra = fields.pop("extra", None) or {}
        shapes, memory = extra.get("shape_timings") or [], extra.get("memory") or {}
        roofline = extra.get("roofline") or {}
        with self._write() as c:
            environment = extra.get("environment")
            if environment:
                fields["environment_id"] = environment_id(
                    c, environment_row(environment, self.engine_version), self._environments)
            row = c.execute(sql.INSERT_EVALUATION, dict(
                fields, program_id=program.id, created_at=time.time(), gpu_peak_mb=memory.get("peak_mb"),
                reference_peak_mb=memory.get("reference_peak_mb"),
                phases=json.dumps(extra["phases"]) if extra.get("phases") else None,
                timing_round=json.dumps(extra["timing_round"]) if extra.get("timing_round") else None,
                roofline_bound=roofline.get("bound"), floor_ms=roofline.get("floor_ms"),
                memory_floor_ms=roofline.get("memory_ms"), compute_floor_ms=roofline.get("compute_ms"),
                kernel_profile=json.dumps(extra["kernel_profile"]) if extra.get("kernel_profile") else None,
                timed_checks=json.dumps(extra["timed_checks"]) if extra.get("timed_checks") else None))
            if shapes:
                evaluation_id = row.inserted_primary_key[0]
                c.execute(sql.INSERT_SHAPE_TIMING, [shape_timing_row(s, evaluation_id) for s in shapes])
            self._set_meta(c, meta or {})
            if key != cell_key(known):  # completed by measured descriptors, or placed in a CVT cell
                c.execute(sql.SET_CELL_KEY, dict(pid=program.id, k=key))
            if not result.correct or result.speedup is None:
                return Insert.NOT_ADDED
            return self._place(c, program.task, program.island, program.id, key, result.speedup,
                               noise=result.speedup_noise or 0.0)

    def fill_compiled_baseline(self, program_ids: list[int], ratio: float) -> int:
        """The torch.compile baseline of results recorded before their task's was measured
        (``compiled_runtime_ms``, ``speedup_vs_compiled``), from its compiled/eager ``ratio``; rows
        that have one keep it.  Returns the rows filled."""
        if not program_ids:
            return 0
        with self._write() as c:
            return c.execute(sql.FILL_COMPILED, dict(ids=list(program_ids), ratio=float(ratio))).rowcount

    def without_compiled_baseline(self) -> list[tuple[int, str, str]]:
        """``(program id, task, device)`` of timed results without a torch.compile figure: a resumed run's,
        recorded before their task's baseline was measured (or with none to come)."""
        with self._tx() as c:
            return [tuple(row) for row in c.execute(sql.WITHOUT_COMPILED).all()]

    def _place(self, c, task: str, island: int, program_id: int, key: str, fitness: float,
               noise: float = 0.0) -> Insert:
        current = self._cell(c, task, island, key)
        if current is None:
            c.execute(sql.INSERT_CELL, dict(task=task, island=island, key=key, program_id=program_id,
                                         fitness=fitness, updated_at=time.time()))
            outcome = Insert.NEW_CELL
        elif fitness > current[1] * (1.0 + max(noise, 0.0)):
            c.execute(sql.UPDATE_CELL, dict(t=task, i=island, k=key, pid=program_id, f=fitness, now=time.time()))
            outcome = Insert.IMPROVED
        else:
            return Insert.NOT_ADDED
        self._staged[(task, island, key)] = (program_id, fitness)
        return outcome

    def _cell(self, c, task: str, island: int, key: str) -> tuple[int, float] | None:
        """(program_id, fitness) of a cell's elite as this transaction sees it; None: empty."""
        if (task, island, key) in self._staged:
            return self._staged[(task, island, key)]
        return self._task_cells(c, task).get((island, key))

    def _empty(self, c, task: str, island: int, key: str) -> None:
        c.execute(sql.DELETE_CELL, dict(t=task, i=island, k=key))
        self._staged[(task, island, key)] = None

    def _task_cells(self, c, task: str) -> dict[tuple[int, str], tuple[int, float]]:
        cells = self._cells.get(task)
        if cells is None:
            cells = {(island, key): (pid, fitness) for island, key, pid, fitness in c.execute(
                select(sql.CELLS.c.island, sql.CELLS.c.key, sql.CELLS.c.program_id, sql.CELLS.c.fitness)
                .where(sql.CELLS.c.task == task))}
            self._cells[task] = cells
        return cells

    def pending(self) -> list[Program]:
        """Programs with no evaluation yet: in flight when the run stopped."""
        evaluated = select(sql.EVALUATIONS.c.program_id).where(sql.EVALUATIONS.c.program_id == sql.PROGRAMS.c.id)
        with self._tx() as c:
            # NOT EXISTS lets SQLite answer from indexes alone, without reading program rows.
            ids = sorted(c.scalars(select(sql.PROGRAMS.c.id).where(~evaluated.exists())).all())
            return self._programs(c, ids)

    def get(self, program_id: int) -> Program:
        with self._tx() as c:
            return self._programs(c, [program_id])[0]

    _RESULT_FIELDS = tuple(f for f in EvalResult.__dataclass_fields__ if f != "extra")

    def _programs(self, c, ids) -> list[Program]:
        """Programs with their lineage and latest evaluation, in the order of ``ids`` (copies)."""
        ids = list(ids)
        missing = [i for i in ids if i not in self._evaluated]
        loaded = {p.id: p for p in self._load_programs(c, missing)}
        for p in loaded.values():
            if p.result is not None:
                self._evaluated[p.id] = p
        while len(self._evaluated) > _PROGRAM_CACHE_SIZE:
            self._evaluated.popitem(last=False)
        found = [self._evaluated.get(i) or loaded.get(i) for i in ids]
        return [dataclasses.replace(p) for p in found if p is not None]

    def _load_programs(self, c, ids: list[int]) -> list[Program]:
        if not ids:
            return []
        latest = (select(func.max(sql.EVALUATIONS.c.id)).where(sql.EVALUATIONS.c.program_id == sql.PROGRAMS.c.id)
                  .correlate(sql.PROGRAMS).scalar_subquery())
        columns = (sql.EVALUATIONS.c[f] for f in self._RESULT_FIELDS + PROFILE_FIELDS)
        rows = c.execute(select(sql.PROGRAMS, *columns)
                         .outerjoin(sql.EVALUATIONS, sql.EVALUATIONS.c.id == latest)
                         .where(sql.PROGRAMS.c.id.in_(ids))).mappings().all()
        links: dict[int, list] = {}
        for child, parent, role in c.execute(select(sql.LINEAGE.c.child_id, sql.LINEAGE.c.parent_id, sql.LINEAGE.c.role)
                                             .where(sql.LINEAGE.c.child_id.in_(ids))):
            links.setdefault(child, []).append((parent, role))
        by_id = {}
        for r in rows:
            result = None
            if r["status"] is not None:
                result = EvalResult.from_dict({f: r[f] for f in self._RESULT_FIELDS})
                result.extra = profile_extra(r)
            lineage = links.get(r["id"], [])
            by_id[r["id"]] = Program(
                id=r["id"], task=r["task"], island=r["island"], generation=r["generation"],
                operator=r["operator"], source=r["source"], result=result, source_hash=r["source_hash"],
                parent_ids=tuple(p for p, role in lineage if role == "parent"),
                inspiration_ids=tuple(p for p, role in lineage if role == "inspiration"),
                descriptors=parse_cell_key(r["cell_key"]) if r["cell_key"] else {},
            )
        return list(by_id.values())

    # -- elites and sampling --------------------------------------------------
    def _elite_cells(self, c, task: str, island: int | None = None) -> list[tuple[str, int, float]]:
        """(key, program_id, fitness) per cell; over all islands, the best per key."""
        best: dict[str, tuple[str, int, float]] = {}
        for (cell_island, key), (program_id, fitness) in self._task_cells(c, task).items():
            if island is not None and cell_island != island:
                continue
            if key not in best or fitness > best[key][2]:
                best[key] = (key, program_id, fitness)
        return sorted(best.values())

    def elites(self, task: str, island: int | None = None) -> list[Program]:
        """Elites of a task's cells (on one island, or the best per cell over all islands)."""
        with self._tx() as c:
            return self._programs(c, [pid for _, pid, _ in self._elite_cells(c, task, island)])

    def has_elites(self, task: str) -> bool:
        with self._tx() as c:
            return bool(self._task_cells(c, task))

    def sample_parent(self, task: str, island: int, rng: np.random.Generator,
                      selection: Selection = UNIFORM) -> Program | None:
        """A parent chosen by ``selection`` among the island's elites (any island's if it has none)."""
        with self._tx() as c:
            cells = self._elite_cells(c, task, island) or self._elite_cells(c, task)
            if not cells:
                return None
            children = {}
            if selection.needs_children:
                children = dict(c.execute(sql.CHILD_COUNTS, dict(ids=[pid for _, pid, _ in cells])).all())
            elites = [EliteCell(key, pid, fitness, children.get(pid, 0)) for key, pid, fitness in cells]
            pick = selection.pick(elites, rng, self.layout, {key for key, _, _ in cells})
            return self._programs(c, [pick.program_id])[0]

    def inspirations(self, task: str, exclude: int, k: int, rng: np.random.Generator,
                     strategy: Inspiration = BEST_THEN_RANDOM) -> list[Program]:
        """Up to ``k`` elites of the task other than ``exclude`` (the parent), chosen by ``strategy``."""
        with self._tx() as c:
            cells = self._elite_cells(c, task)
            parent = next((key for (_, key), (pid, _) in self._task_cells(c, task).items() if pid == exclude), None)
            elites = [EliteCell(key, pid, fitness) for key, pid, fitness in cells if pid != exclude]
            picks = strategy.pick(elites, parent, k, rng, self.layout)
            return self._programs(c, [e.program_id for e in picks])

"""Read-only queries over a run's archive, for ``evo status``, ``evo report`` and ``evo export``.

:class:`ArchiveReader` opens the database read-only (SQLite: ``mode=ro``, so
it neither creates nor changes anything and never waits on the run's
``.lock``) and answers with SQLAlchemy Core selects over the tables of
``archive.models``.  It works on a run that is still going: in WAL mode
readers see the last committed state without blocking the writer.  Columns
added by later schema versions (``roofline_fraction``, ``speedup_vs_compiled``,
...) may be NULL, and tables they added (``shape_timings``, ``cvt_centroids``, ``rejections``) read
as empty.
"""
from __future__ import annotations

import json
import sqlite3
import urllib.parse
from pathlib import Path

from sqlalchemy import and_, case, create_engine, func, inspect, null, select
from sqlalchemy.exc import DatabaseError, OperationalError

from archive.store import ArchiveError
from evo.core.program import SEED_OPERATORS
from archive.statements import (
    CELLS, CENTROIDS, ENVIRONMENTS, EVALUATIONS, LINEAGE, LLM_CALLS, META, MIGRATIONS, PROGRAMS, REJECTIONS,
    SET_ASIDE, SHAPE_TIMINGS, STATS,
)

P, E, L, S = PROGRAMS.c, EVALUATIONS.c, LLM_CALLS.c, SHAPE_TIMINGS.c
CORRECT = "correct"
# The latest evaluation of each program (a program evaluated again after a resume keeps its last result).
LATEST = select(func.max(E.id).label("id")).group_by(E.program_id).subquery()
EVALUATED = EVALUATIONS.join(LATEST, LATEST.c.id == E.id).join(PROGRAMS, P.id == E.program_id)
KERNEL_FIELDS = (P.id, P.task, P.island, P.generation, P.operator, P.source, P.source_hash, P.cell_key,
                 E.speedup, E.runtime_ms, E.ref_runtime_ms, E.timing_representative, E.device, E.created_at)
# Facts of schema 2; an archive written by an older engine lacks them and reads as NULL.
NEWER_FIELDS = ("speedup_noise", "speedup_vs_compiled", "roofline_fraction", "compiled_runtime_ms",
                "ref_runtime_spread", "environment_id", "gpu_peak_mb", "reference_peak_mb", "roofline_bound",
                "floor_ms", "timed_checks")


def _connect_readonly(path: Path):
    """A read-only SQLite connection that creates no file.

    While a run has the database open, its ``-wal`` file exists and readers
    share its ``-shm`` index (``mode=ro``: the database and the WAL are never
    written).  Without a ``-wal`` no one has it open and ``immutable=1`` reads
    the file alone, without creating ``-wal`` and ``-shm`` beside it.
    """
    def connect():
        wal = path.with_name(path.name + "-wal").exists()
        uri = f"file:{urllib.parse.quote(str(path))}?mode=ro" + ("" if wal else "&immutable=1")
        return sqlite3.connect(uri, uri=True, check_same_thread=False)
    return connect


class ArchiveReader:
    """Selects over one run's archive; opens nothing for writing."""

    def __init__(self, *, path: Path | None = None, url: str | None = None):
        if path is not None:
            path = Path(path)
            if not path.is_file():
                raise ArchiveError(f"no archive database at {path}")
            self.where = str(path)
            self.engine = create_engine("sqlite://", creator=_connect_readonly(path))
        elif url is not None:
            self.where = url
            self.engine = create_engine(url)
        else:
            raise ValueError("ArchiveReader needs a path or a URL")

    def close(self) -> None:
        self.engine.dispose()

    def _rows(self, statement) -> list[dict]:
        try:
            with self.engine.connect() as c:
                return [dict(r) for r in c.execute(statement).mappings()]
        except (DatabaseError, OperationalError) as exc:
            raise ArchiveError(f"cannot read archive {self.where}: {exc.orig}") from None

    def _one(self, statement) -> dict:
        return self._rows(statement)[0]

    # -- tasks ------------------------------------------------------------------
    def task_names(self) -> list[str]:
        return [r["task"] for r in self._rows(select(P.task).distinct().order_by(P.task))]

    def task_counts(self) -> dict[str, dict]:
        """Per task: programs, evaluations, correct evaluations and the seed's best speedup."""
        programs = self._rows(select(P.task, func.count().label("programs")).group_by(P.task))
        evals = self._rows(
            select(P.task, func.count(E.id).label("evaluations"),
                   func.count(E.id).filter(E.status == CORRECT).label("correct"),
                   func.max(case((and_(E.status == CORRECT, P.operator.in_(SEED_OPERATORS)), E.speedup)))
                   .label("seed_speedup"))
            .select_from(EVALUATIONS.join(PROGRAMS, P.id == E.program_id)).group_by(P.task))
        out = {r["task"]: dict(programs=r["programs"], evaluations=0, correct=0, seed_speedup=None) for r in programs}
        for r in evals:
            out[r["task"]].update({k: r[k] for k in ("evaluations", "correct", "seed_speedup")})
        return out

    def set_aside(self) -> dict[str, dict]:
        """task -> {stage, reason, source_hash, created_at} of the tasks the run does not search (schema 5)."""
        if not self._has_table("set_aside"):
            return {}
        return {r["task"]: r for r in self._rows(select(SET_ASIDE).order_by(SET_ASIDE.c.task))}

    def environments(self, ids) -> dict[int, dict]:
        """Environment rows (gpu, driver, cuda, torch, triton, python, engine) by id (schema 5)."""
        ids = [i for i in ids if i is not None]
        if not ids or not self._has_table("environments"):
            return {}
        return {r["id"]: r for r in self._rows(select(ENVIRONMENTS).where(ENVIRONMENTS.c.id.in_(ids)))}

    def cell_fitness(self, task: str) -> dict[str, float]:
        """Best fitness per MAP-Elites cell key over all islands."""
        rows = self._rows(select(CELLS.c.key, func.max(CELLS.c.fitness).label("f"))
                          .where(CELLS.c.task == task).group_by(CELLS.c.key))
        return {r["key"]: r["f"] for r in rows}

    def stats_history(self, task: str, island: int = -1) -> list[dict]:
        return self._rows(select(STATS).where(STATS.c.task == task, STATS.c.island == island).order_by(STATS.c.id))

    def correct_timeline(self, task: str) -> list[dict]:
        """(created_at, speedup) of every correct evaluation of the task, oldest first."""
        return self._rows(select(E.created_at, E.speedup).select_from(EVALUATIONS.join(PROGRAMS, P.id == E.program_id))
                          .where(P.task == task, E.status == CORRECT, E.speedup.is_not(None)).order_by(E.id))

    def child_evaluation_count(self) -> int:
        return self._one(select(func.count(E.id).label("n")).select_from(EVALUATIONS.join(PROGRAMS, P.id == E.program_id))
                         .where(P.operator.not_in(SEED_OPERATORS)))["n"]

    def migration_counts(self) -> dict[str, int]:
        """Elites placed on another island, by kind (copy, move, reseed; all copies before schema 4)."""
        M = MIGRATIONS.c
        if "kind" not in self._columns("migrations"):
            return {"copy": self._one(select(func.count(M.id).label("n")))["n"]}
        return {r["kind"]: r["n"] for r in self._rows(select(M.kind, func.count(M.id).label("n"))
                                                      .group_by(M.kind).order_by(M.kind))}

    def phase_totals(self) -> dict:
        """Seconds per evaluation phase summed over the run's evaluations (schema 6), with how many had
        them: ``{"evaluations": n, "seconds": {phase: total}, "under_way_s": wall seconds with one under
        way, "spans": [(began, ended)], "tasks": {task: {"evaluations": n, "seconds": {phase: total}}}}``."""
        empty = {"evaluations": 0, "seconds": {}, "under_way_s": 0.0, "spans": [], "tasks": {}}
        if "phases" not in self._columns("evaluations"):
            return empty
        rows = self._rows(select(P.task, E.phases, E.created_at).select_from(EVALUATIONS.join(PROGRAMS, P.id == E.program_id))
                          .where(E.phases.is_not(None)))
        totals, tasks, spans = {}, {}, []
        for row in rows:
            phases = json.loads(row["phases"])
            task = tasks.setdefault(row["task"], {"evaluations": 0, "seconds": {}})
            task["evaluations"] += 1
            for phase, seconds in phases.items():
                if isinstance(seconds, (int, float)):
                    totals[phase] = totals.get(phase, 0.0) + seconds
                    task["seconds"][phase] = task["seconds"].get(phase, 0.0) + seconds
            if isinstance(phases.get("total_s"), (int, float)) and row["created_at"]:
                spans.append((row["created_at"] - phases["total_s"], row["created_at"]))  # recorded at its end
        return {**empty, "evaluations": len(rows), "seconds": totals, "under_way_s": _union(spans),
                "spans": spans, "tasks": tasks}

    def timing_rounds(self) -> dict[str, int]:
        """How the raced children were timed (schema 7): ``{"short": n, "full": n, "from_short": n}``,
        from_short counting the full rounds that went on from their short one."""
        counts = {"short": 0, "full": 0, "from_short": 0}
        if "timing_round" not in self._columns("evaluations"):
            return counts
        for row in self._rows(select(E.timing_round).where(E.timing_round.is_not(None))):
            entry = json.loads(row["timing_round"])
            if entry.get("round") in ("short", "full"):
                counts[entry["round"]] += 1
            counts["from_short"] += bool(entry.get("from_short"))
        return counts

    def timed_checks(self) -> dict:
        """What the correct results' timed calls were held to (schema 11), each program by its latest
        evaluation: ``{"correct": n, "checked": n, "fresh": n, "off": {reason: n}, "audited": n}``:
        checked, those whose timed calls were checked; fresh, those whose every timed call took input
        values drawn afresh; off, why the others' were not; audited, those held to an audited call's
        device time (on a GPU)."""
        counts = {"correct": 0, "checked": 0, "fresh": 0, "off": {}, "audited": 0}
        if "timed_checks" not in self._columns("evaluations"):
            return counts
        for row in self._rows(select(E.timed_checks).select_from(EVALUATED).where(E.status == CORRECT)):
            counts["correct"] += 1
            if not row["timed_checks"]:
                continue
            verified = json.loads(row["timed_checks"])
            counts["checked"] += 1
            counts["audited"] += "audited_call_ms" in verified
            if verified.get("fresh_inputs"):
                counts["fresh"] += 1
            else:
                why = verified.get("fresh_inputs_off") or "not recorded"
                counts["off"][why] = counts["off"].get(why, 0) + 1
        return counts

    def meta(self, key: str) -> str | None:
        """A value the run saved in its ``meta`` table (e.g. the meta-prompt pool)."""
        rows = self._rows(select(META.c.value).where(META.c.key == key))
        return rows[0]["value"] if rows else None

    def started_at(self) -> float | None:
        return self._one(select(func.min(P.created_at).label("t")))["t"]

    # -- kernels and lineage -------------------------------------------------------
    def best_kernels(self, task: str, k: int = 1, min_speedup: float | None = None) -> list[dict]:
        """The ``k`` fastest correct programs of a task (by their latest evaluation), fastest first."""
        where = [P.task == task, E.status == CORRECT, E.speedup.is_not(None)]
        if min_speedup is not None:
            where.append(E.speedup >= min_speedup)
        return self._kernels(where, limit=k)

    def kernels(self, ids) -> list[dict]:
        """The correct programs among ``ids``, with their latest evaluation as :meth:`best_kernels` gives them."""
        return self._kernels([P.id.in_(list(ids)), E.status == CORRECT])

    def _kernels(self, where: list, limit: int | None = None) -> list[dict]:
        present = self._columns("evaluations")
        newer = [E[name] if name in present else null().label(name) for name in NEWER_FIELDS]
        return self._rows(select(*KERNEL_FIELDS, *newer).select_from(EVALUATED).where(*where)
                          .order_by(E.speedup.desc(), P.id).limit(limit))

    def shape_timings(self, task: str) -> list[dict]:
        """Per correct program of the task, its latest evaluation's timing of each shape set (schema 4,
        ``evaluator.time_shapes=all``): program_id, shape, numel, speedup, speedup_noise, runtime_ms,
        ref_runtime_ms; smallest shape first.  Empty when no evaluation timed its shapes separately."""
        if not self._has_table("shape_timings"):
            return []
        return self._rows(select(P.id.label("program_id"), S.shape, S.numel, S.speedup, S.speedup_noise,
                                 S.runtime_ms, S.ref_runtime_ms)
                          .select_from(EVALUATED.join(SHAPE_TIMINGS, S.evaluation_id == E.id))
                          .where(P.task == task, E.status == CORRECT).order_by(S.numel, S.shape, P.id))

    def centroids(self) -> list[list[float]]:
        """A CVT archive's centroids (one list of coordinates per cell, by cell index); empty for a grid."""
        if not self._has_table("cvt_centroids"):
            return []
        rows = self._rows(select(CENTROIDS).order_by(CENTROIDS.c.cell, CENTROIDS.c.axis))
        out: list[list[float]] = []
        for r in rows:
            if r["cell"] == len(out):
                out.append([])
            out[r["cell"]].append(r["value"])
        return out

    def _columns(self, table: str) -> set[str]:
        try:
            return {c["name"] for c in inspect(self.engine).get_columns(table)}
        except (DatabaseError, OperationalError) as exc:
            raise ArchiveError(f"cannot read archive {self.where}: {exc.orig}") from None

    def _has_table(self, table: str) -> bool:
        try:
            return inspect(self.engine).has_table(table)
        except (DatabaseError, OperationalError) as exc:
            raise ArchiveError(f"cannot read archive {self.where}: {exc.orig}") from None

    def programs(self, ids) -> dict[int, dict]:
        """Programs by id with their latest evaluation's status and speedup (None if not evaluated)."""
        ids = list(ids)
        latest = select(func.max(E.id)).where(E.program_id == P.id).correlate(PROGRAMS).scalar_subquery()
        rows = self._rows(select(P.id, P.operator, P.source, P.generation, P.island, E.status, E.speedup)
                          .select_from(PROGRAMS.outerjoin(EVALUATIONS, E.id == latest)).where(P.id.in_(ids)))
        return {r["id"]: r for r in rows}

    def lineage(self, program_id: int, limit: int = 200) -> list[int]:
        """Ids from the oldest ancestor (a seed) to ``program_id``, following each child's first parent."""
        chain, seen = [program_id], {program_id}
        while len(chain) < limit:
            parents = self._rows(select(LINEAGE.c.parent_id).where(LINEAGE.c.child_id == chain[-1],
                                                                   LINEAGE.c.role == "parent")
                                 .order_by(LINEAGE.c.parent_id).limit(1))
            if not parents or parents[0]["parent_id"] in seen:
                break
            chain.append(parents[0]["parent_id"])
            seen.add(chain[-1])
        return chain[::-1]

    # -- operators and LLM ---------------------------------------------------------
    def operator_rates(self) -> list[dict]:
        """Per operator: programs made, evaluated, correct (latest evaluations), children rejected as
        near-duplicates (not evaluated), and the success rate: correct over evaluated and rejected."""
        made = {r["operator"]: r["n"] for r in self._rows(select(P.operator, func.count().label("n"))
                                                          .group_by(P.operator))}
        rows = self._rows(select(P.operator, func.count(E.id).label("evaluated"),
                                 func.count(E.id).filter(E.status == CORRECT).label("correct"))
                          .select_from(EVALUATED).group_by(P.operator))
        by_op = {r["operator"]: r for r in rows}
        rejected = self.rejections()
        out = []
        for op in sorted({*made, *rejected}):
            evaluated, correct = by_op.get(op, {}).get("evaluated", 0), by_op.get(op, {}).get("correct", 0)
            out.append(dict(operator=op, programs=made.get(op, 0), evaluated=evaluated, correct=correct,
                            rejected=rejected.get(op, 0), rate=_rate(correct, evaluated + rejected.get(op, 0))))
        return out

    def rejections(self) -> dict[str, int]:
        """operator -> children rejected as near-duplicates before evaluation (schema 10)."""
        if not self._has_table("rejections"):
            return {}
        R = REJECTIONS.c
        return {r["operator"]: r["n"] for r in self._rows(select(R.operator, func.count().label("n"))
                                                          .group_by(R.operator))}

    def model_rates(self) -> list[dict]:
        """Per LLM model: calls, failed calls, calls whose program was correct, cost."""
        correct = select(E.program_id).where(E.status == CORRECT)
        rows = self._rows(select(L.model, func.count(L.id).label("calls"),
                                 func.count(L.id).filter(L.error != "").label("errors"),
                                 func.count(L.id).filter(L.program_id.in_(correct)).label("correct"),
                                 func.coalesce(func.sum(L.cost_usd), 0.0).label("cost_usd"))
                          .group_by(L.model).order_by(L.model))
        return [dict(r, rate=_rate(r["correct"], r["calls"])) for r in rows]

    def llm_spend(self) -> dict:
        """Request attempts (failed ones included), their dollars, failures and tokens."""
        return self._one(select(func.count(L.id).label("calls"), func.coalesce(func.sum(L.cost_usd), 0.0).label("cost_usd"),
                                func.count(L.id).filter(L.error != "").label("errors"),
                                func.coalesce(func.sum(L.prompt_tokens), 0).label("prompt_tokens"),
                                func.coalesce(func.sum(L.completion_tokens), 0).label("completion_tokens")))

    def prompts(self, program_ids: list[int]) -> dict[int, list[dict]]:
        """program id -> the LLM calls that made it, oldest first: model, the prompt as sent, the error."""
        out: dict[int, list[dict]] = {}
        for r in self._rows(select(L.program_id, L.model, L.operator, L.prompt, L.error)
                            .where(L.program_id.in_(list(program_ids))).order_by(L.id)):
            out.setdefault(r["program_id"], []).append(r)
        return out

    def cost_timeline(self) -> list[dict]:
        return self._rows(select(L.created_at, L.cost_usd).order_by(L.id))


def open_reader(archive_url: str):
    """A read-only :class:`ArchiveReader` of a run's archive, or None where there is none it can read
    (the :class:`archive.Archive` refuses a damaged one later, with its own reason)."""
    reader = None
    try:
        if archive_url.startswith("sqlite:///"):
            path = Path(archive_url.split("///", 1)[1])
            if not path.is_file():
                return None
            reader = ArchiveReader(path=path)
        else:
            reader = ArchiveReader(url=archive_url)
        reader.meta("config")  # reads, or raises on a database that is not one
        return reader
    except Exception:  # noqa: BLE001
        if reader is not None:
            reader.close()
        return None


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def seconds_under_way(windows: list[tuple[float, float]], start: float, end: float) -> dict[int, float]:
    """Seconds of ``start``..``end`` with k of ``windows`` under way, by k (0 included): how full a
    pipeline was kept (``experiments/search_rate.py``)."""
    edges = sorted([(max(a, start), 1) for a, b in windows if b > start and a < end]
                   + [(min(b, end), -1) for a, b in windows if b > start and a < end])
    under_way, level, last = {}, 0, start
    for t, step in edges:
        under_way[level] = under_way.get(level, 0.0) + max(0.0, t - last)
        level, last = level + step, max(last, t)
    under_way[level] = under_way.get(level, 0.0) + max(0.0, end - last)
    return under_way


def _union(windows: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of ``windows``: the wall time with an evaluation under way,
    however many overlapped (``evaluator.pipeline``, several GPUs)."""
    covered, end = 0.0, float("-inf")
    for start, stop in sorted(windows):
        if stop > end:
            covered += stop - max(start, end)
            end = stop
    return covered

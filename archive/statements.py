"""SQL the archive runs on its hot paths, built once, and SQLite's connection settings.

Building a statement per call (``.values(...)``, ``.where(...)``) costs more
than running it, so the hot statements take bind parameters instead.
"""
from __future__ import annotations

from sqlalchemy import bindparam, delete, func, insert, select, update

from archive.models import (
    CellRow, CentroidRow, EnvironmentRow, EvaluationRow, LineageRow, LLMCallRow, MetaRow, MigrationRow, ProgramRow,
    RejectionRow, SetAsideRow, ShapeTimingRow, StatsRow,
)

META, PROGRAMS, LINEAGE, EVALUATIONS, CELLS, MIGRATIONS, LLM_CALLS, STATS, CENTROIDS, SHAPE_TIMINGS = (
    t.__table__ for t in (MetaRow, ProgramRow, LineageRow, EvaluationRow, CellRow, MigrationRow, LLMCallRow,
                          StatsRow, CentroidRow, ShapeTimingRow))
ENVIRONMENTS, SET_ASIDE, REJECTIONS = EnvironmentRow.__table__, SetAsideRow.__table__, RejectionRow.__table__

INSERT_PROGRAM = insert(PROGRAMS)
INSERT_LINEAGE = insert(LINEAGE)
INSERT_EVALUATION = insert(EVALUATIONS)
INSERT_SHAPE_TIMING = insert(SHAPE_TIMINGS)
INSERT_LLM_CALL = insert(LLM_CALLS)
INSERT_MIGRATION = insert(MIGRATIONS)
CELL_WHERE = (CELLS.c.task == bindparam("t"), CELLS.c.island == bindparam("i"), CELLS.c.key == bindparam("k"))
INSERT_CELL = insert(CELLS)
DELETE_CELL = delete(CELLS).where(*CELL_WHERE)
UPDATE_CELL = update(CELLS).where(*CELL_WHERE).values(
    program_id=bindparam("pid"), fitness=bindparam("f"), updated_at=bindparam("now"))
CHILD_COUNTS = (select(LINEAGE.c.parent_id, func.count()).where(
    LINEAGE.c.parent_id.in_(bindparam("ids", expanding=True)), LINEAGE.c.role == "parent")
    .group_by(LINEAGE.c.parent_id))
UPDATE_META = update(META).where(META.c.key == bindparam("k")).values(value=bindparam("v"))
SET_CELL_KEY = update(PROGRAMS).where(PROGRAMS.c.id == bindparam("pid")).values(cell_key=bindparam("k"))
# A result that came back before its task's torch.compile baseline was measured (evaluator late_baseline):
# compiled_ms = eager_ms(its own run) * compiled/eager, as for the results after it.
FILL_COMPILED = update(EVALUATIONS).where(
    EVALUATIONS.c.program_id.in_(bindparam("ids", expanding=True)), EVALUATIONS.c.compiled_runtime_ms.is_(None),
    EVALUATIONS.c.runtime_ms > 0, EVALUATIONS.c.ref_runtime_ms > 0).values(
    compiled_runtime_ms=bindparam("ratio") * EVALUATIONS.c.ref_runtime_ms,
    speedup_vs_compiled=bindparam("ratio") * EVALUATIONS.c.ref_runtime_ms / EVALUATIONS.c.runtime_ms)
WITHOUT_COMPILED = select(EVALUATIONS.c.program_id, PROGRAMS.c.task, EVALUATIONS.c.device).join(
    PROGRAMS, PROGRAMS.c.id == EVALUATIONS.c.program_id).where(
    EVALUATIONS.c.compiled_runtime_ms.is_(None), EVALUATIONS.c.runtime_ms > 0, EVALUATIONS.c.ref_runtime_ms > 0)
# A task's programs added since the one with id "after", for the novelty check's fingerprints.
SOURCES_AFTER = select(PROGRAMS.c.id, PROGRAMS.c.source).where(
    PROGRAMS.c.task == bindparam("t"), PROGRAMS.c.id > bindparam("after")).order_by(PROGRAMS.c.id)
FIND_HASH = select(PROGRAMS.c.id).where(PROGRAMS.c.task == bindparam("t"),
                                        PROGRAMS.c.source_hash == bindparam("h")).limit(1)


def sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA cache_size=-65536")  # 64 MiB of pages instead of 2 MiB
    cursor.execute("PRAGMA temp_store=MEMORY")
    cursor.execute("PRAGMA wal_autocheckpoint=10000")  # fewer, larger checkpoints
    cursor.close()

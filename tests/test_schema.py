"""Schema versions: new databases come from the migrations, older ones are upgraded, newer ones refused."""
import hashlib
import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from archive import Archive, ArchiveError
from archive.models import SCHEMA_VERSION, Base
from alembic import command

from archive.schema import _config, head, revision
from evaluator import EvalResult, Status
from tests.test_archive import add, ok, src

SCHEMA_1 = Path(__file__).parent / "data" / "archive_schema_1.sql"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_migrations_build_exactly_the_models(db_url):
    Archive(db_url).close()
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        assert MigrationContext.configure(conn).get_current_revision() == head() == revision(SCHEMA_VERSION)
    engine.dispose()


def schema_1_database(path: Path) -> None:
    """A database as an engine of schema 1 left it: its tables, rows and meta, no alembic_version."""
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA_1.read_text())
        db.executescript("""
            INSERT INTO meta VALUES ('schema_version', '1'), ('config', 'old: run');
            INSERT INTO programs VALUES (1, 't', 0, 0, 'seed', 'BLOCK_SIZE = 256\nNUM_WARPS = 4\n', 'h1',
                                         'block_size=256|num_warps=4', 1.0);
            INSERT INTO programs VALUES (2, 't', 0, 1, 'constants', 'BLOCK_SIZE = 512\nNUM_WARPS = 4\n', 'h2',
                                         'block_size=512|num_warps=4', 2.0);
            INSERT INTO lineage VALUES (2, 1, 'parent');
            INSERT INTO evaluations (id, program_id, status, reason, speedup, runtime_ms, ref_runtime_ms,
                                     runtime_spread, timing_representative, device, shapes_checked, error,
                                     wall_s, created_at)
                VALUES (1, 1, 'correct', '', 1.5, 1.0, 1.5, 0.01, 1, 'gpu', 4, '', 2.0, 1.0);
            INSERT INTO cells VALUES ('t', 0, 'block_size=256|num_warps=4', 1, 1.5, 1.0);
        """)
    db.close()


def test_a_schema_1_database_is_upgraded_keeping_its_rows(tmp_path):
    path = tmp_path / "archive.db"
    schema_1_database(path)
    archive = Archive(f"sqlite:///{path}")
    assert archive.get_meta("schema_version") == str(SCHEMA_VERSION) and archive.get_meta("config") == "old: run"
    seed = archive.get(1)
    assert seed.fitness == 1.5 and seed.result.speedup_noise is None and seed.result.device == "gpu"
    assert [p.id for p in archive.pending()] == [2] and archive.get(2).parent_ids == (1,)
    assert [p.id for p in archive.elites("t")] == [1]
    child = archive.pending()[0]
    result = EvalResult(status=Status.CORRECT, speedup=2.0, speedup_noise=0.01, roofline_fraction=0.4)
    archive.record_evaluation(child, result)
    archive.close()
    again = Archive(f"sqlite:///{path}")  # reopening an upgraded database changes nothing
    assert again.get(2).result.roofline_fraction == 0.4 and again.stats("t")["cells"] == 2
    again.close()
    with sqlite3.connect(path) as db:
        assert db.execute("select version_num from alembic_version").fetchall() == [(head(),)]


def test_a_schema_2_database_made_without_migrations_is_stamped(tmp_path):
    url = f"sqlite:///{tmp_path / 'archive.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:  # the tables the engine of commit 187a846 made with create_all
        command.upgrade(_config(conn), "0002")
        conn.exec_driver_sql("DROP TABLE alembic_version")
        conn.exec_driver_sql("INSERT INTO meta VALUES ('schema_version', '2')")
    engine.dispose()
    archive = Archive(url)
    p = add(archive, src())
    archive.record_evaluation(p, ok(1.0))
    archive.close()


def test_a_newer_revision_is_refused_and_nothing_is_written(tmp_path):
    path = tmp_path / "archive.db"
    Archive(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as db:
        db.execute("update alembic_version set version_num = '9999'")
    db.close()
    before = digest(path)
    with pytest.raises(ArchiveError, match="newer than this engine.*left as it was"):
        Archive(f"sqlite:///{path}")
    assert digest(path) == before


def test_a_newer_schema_version_writes_nothing(db_url):
    Archive(db_url).set_meta("schema_version", str(SCHEMA_VERSION + 1))
    with pytest.raises(ArchiveError, match="newer than this engine"):
        Archive(db_url)
    engine = create_engine(db_url)
    assert "alembic_version" in inspect(engine).get_table_names()
    engine.dispose()


def test_a_failed_upgrade_rolls_back_entirely(tmp_path, monkeypatch):
    path = tmp_path / "archive.db"
    schema_1_database(path)
    import archive.schema

    real_upgrade = archive.schema.command.upgrade

    def upgrade_then_fail(config, target):
        real_upgrade(config, target)  # the columns are added inside the transaction ...
        raise sqlite3.OperationalError("disk I/O error")  # ... which then fails

    monkeypatch.setattr(archive.schema.command, "upgrade", upgrade_then_fail)
    with pytest.raises(sqlite3.OperationalError):
        Archive(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:
        columns = {row[1] for row in db.execute("pragma table_info(evaluations)")}
        tables = {row[0] for row in db.execute("select name from sqlite_master where type='table'")}
    assert "speedup_noise" not in columns and "alembic_version" not in tables


@pytest.mark.slow
def test_resuming_a_run_with_a_corrupted_archive_fails_cleanly(tmp_path):
    from tests.test_cli import QUICK, evo

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text('{"tasks": ["gelu", "row_sum"], "resumes": 0}')
    db = run_dir / "archive.db"
    db.write_bytes(b"garbage, not SQLite" * 200)
    before = digest(db)
    out = evo("run", f"run.dir={run_dir}", *QUICK)
    assert out.returncode != 0 and "cannot open archive" in out.stderr and "left as it was" in out.stderr
    assert digest(db) == before


def test_an_upgrade_blocked_by_a_lock_is_a_clear_error_and_changes_nothing(tmp_path):
    path = tmp_path / "archive.db"
    schema_1_database(path)
    before = digest(path)
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ArchiveError, match="cannot open archive.*locked.*left as it was"):
            Archive(f"sqlite:///{path}", busy_timeout_s=0.2)
    finally:
        holder.rollback()
        holder.close()
    assert digest(path) == before
    Archive(f"sqlite:///{path}").close()  # once the lock is gone, it upgrades


def test_a_schema_3_database_is_upgraded_keeping_its_migrations(tmp_path):
    url = f"sqlite:///{tmp_path / 'archive.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(_config(conn), "0003")
        conn.exec_driver_sql("INSERT INTO meta VALUES ('schema_version', '3')")
        conn.exec_driver_sql("INSERT INTO programs VALUES (1, 't', 0, 0, 'seed', 'X = 1', 'h1', 'k', 1.0)")
        conn.exec_driver_sql("INSERT INTO migrations VALUES (1, 1, 't', 0, 1, 2.0)")
    engine.dispose()
    archive = Archive(url)
    assert archive.get_meta("schema_version") == str(SCHEMA_VERSION)
    archive.close()
    with sqlite3.connect(tmp_path / "archive.db") as db:
        assert db.execute("select program_id, src_island, dst_island, kind from migrations").fetchall() == [
            (1, 0, 1, "copy")]
    db.close()


def test_shape_timings_are_stored_with_their_evaluation(db_url):
    archive = Archive(db_url)
    p = add(archive, src())
    timings = [dict(shape=dict(M=127, N=33), numel=4191, speedup=0.9, speedup_noise=0.02, runtime_ms=0.01,
                    ref_runtime_ms=0.009),
               dict(shape={}, numel=1 << 24, speedup=1.5, speedup_noise=0.01, runtime_ms=1.0, ref_runtime_ms=1.5)]
    archive.record_evaluation(p, EvalResult(status=Status.CORRECT, speedup=1.5, extra={"shape_timings": timings}))
    archive.close()
    engine = create_engine(db_url)
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("select shape, numel, speedup from shape_timings order by numel").fetchall()
    engine.dispose()
    assert [tuple(r) for r in rows] == [("M=127,N=33", 4191, 0.9), ("default", 1 << 24, 1.5)]

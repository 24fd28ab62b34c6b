"""experiments/snapshot_run.py: a live run directory copied whole, committed rows included, while a
writer holds the archive open in WAL mode, and a kill mid-snapshot keeps the previous tarball."""
import sqlite3
import tarfile

import pytest

from experiments.snapshot_run import main, snapshot


def _live_run(tmp_path):
    run = tmp_path / "strict"
    run.mkdir()
    (run / "run.json").write_text('{"tasks": 2}')
    (run / "events.jsonl").write_text('{"event": "start"}\n')
    writer = sqlite3.connect(run / "archive.db")
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")  # the rows stay in the WAL, as between checkpoints
    writer.execute("CREATE TABLE programs (id INTEGER PRIMARY KEY, source TEXT)")
    writer.executemany("INSERT INTO programs (source) VALUES (?)", [("a",), ("b",)])
    writer.commit()
    return run, writer


def _rows(tarball, tmp_path, name="strict"):
    out = tmp_path / "restored"
    with tarfile.open(tarball) as tar:
        tar.extractall(out, filter="data")
        names = sorted(m.name for m in tar.getmembers())
    db = sqlite3.connect(out / name / "archive.db")
    try:
        return names, [r[0] for r in db.execute("SELECT source FROM programs ORDER BY id")]
    finally:
        db.close()


def test_snapshot_holds_rows_still_in_the_wal_and_no_wal_files(tmp_path):
    run, writer = _live_run(tmp_path)
    try:
        assert (run / "archive.db-wal").stat().st_size > 0
        target = snapshot(run, tmp_path / "out" / "strict.tar.gz")
        writer.execute("INSERT INTO programs (source) VALUES ('c')")  # after the snapshot: not in it
        writer.commit()
    finally:
        writer.close()
    names, rows = _rows(target, tmp_path)
    assert rows == ["a", "b"]
    assert names == ["strict", "strict/archive.db", "strict/events.jsonl", "strict/run.json"]


def test_a_failed_snapshot_leaves_the_previous_one(tmp_path, monkeypatch):
    run, writer = _live_run(tmp_path)
    writer.close()
    target = tmp_path / "strict.tar.gz"
    main([str(run), str(target)])
    before = target.read_bytes()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("experiments.snapshot_run._backup", killed)
    with pytest.raises(KeyboardInterrupt):
        snapshot(run, target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["strict", "strict.tar.gz"]  # no scratch left behind


def test_not_a_run_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        snapshot(tmp_path, tmp_path / "x.tar.gz")

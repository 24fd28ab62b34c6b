"""A consistent copy of a live run directory as a .tar.gz, for device calls that may be killed.

A device call ends at its time limit, and a limit cut short by the session's remaining budget
kills the command before its own `timeout` does; whatever the run directory held then is lost
with the machine (experiments/kernelbench_search.md section 23: one call's 7 minutes of
evaluations).  ``kernelbench_search.sh`` runs this every ``SNAPSHOT_S`` seconds beside the
search, so a killed call still hands back the run as of its last snapshot.

The archive is copied with SQLite's online backup (a consistent state, even while the search
commits; the WAL is folded in), the other files as they are, and the tarball is written beside
the target and renamed over it, so a kill during a snapshot leaves the previous one whole.

    python3 experiments/snapshot_run.py RUN_DIR OUT.tar.gz
"""
from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tarfile
import tempfile
from pathlib import Path

ARCHIVE = "archive.db"
SKIPPED_SUFFIXES = ("-wal", "-shm", "-journal")  # folded into the backed-up archive


def snapshot(run_dir: Path, target: Path) -> Path:
    """Write ``run_dir`` as ``target`` (a .tar.gz whose one member is the run's folder)."""
    run_dir, target = Path(run_dir), Path(target)
    if not (run_dir / ARCHIVE).is_file():
        raise FileNotFoundError(f"{run_dir} has no {ARCHIVE}: not a run directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".snapshot-") as scratch:
        copy = Path(scratch) / run_dir.name
        copy.mkdir()
        for path in run_dir.iterdir():
            if path.name == ARCHIVE or path.name.endswith(SKIPPED_SUFFIXES):
                continue
            if path.is_dir():
                shutil.copytree(path, copy / path.name)
            elif path.is_file():
                shutil.copy2(path, copy / path.name)
        _backup(run_dir / ARCHIVE, copy / ARCHIVE)
        partial = Path(scratch) / "snapshot.tar.gz"
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(copy, arcname=run_dir.name)
        os.replace(partial, target)
    return target


def _backup(source: Path, destination: Path) -> None:
    # A read-only URI: the snapshot must never create or alter anything in the live run.
    live = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=60)
    try:
        copy = sqlite3.connect(destination)
        try:
            live.backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file in the tarball
        finally:
            copy.close()
    finally:
        live.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    snapshot(args.run_dir, args.target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The run directory's own files: the marker of a run, the lock that keeps one engine on it, and
writes that a kill leaves whole.  Everything that opens a run dir (the run, resume, the views) reads
these names from here."""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from evo.core.errors import RunDirError

RUN_FILE = "run.json"
LOCK_FILE = ".lock"


def write_atomically(path: Path, text: str) -> None:
    """Write a whole file or nothing: a run killed mid-write must still resume."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def lock_run_dir(run_dir: Path):
    """An exclusive lock on the run dir: two engines must never drive one run."""
    handle = open(run_dir / LOCK_FILE, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise RunDirError(f"run.dir {run_dir} is in use by another evo run; wait for it to finish") from None
    return handle


def check_run_dir(run_dir: Path, task_names: list[str]) -> bool:
    """True when ``run_dir`` holds a run to resume; raises if it cannot be used."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"run.dir {run_dir} exists and is not a directory")
    marker = run_dir / RUN_FILE
    if marker.exists():
        try:
            previous = json.loads(marker.read_text())
        except (OSError, ValueError) as exc:
            raise RunDirError(f"run.dir {run_dir} has an unreadable {RUN_FILE}: {exc}") from None
        if sorted(previous.get("tasks", [])) != sorted(task_names):
            raise RunDirError(
                f"run.dir {run_dir} holds a run of tasks {', '.join(previous.get('tasks', []))}, "
                f"not {', '.join(task_names)}: choose another run.dir or the same tasks"
            )
        if not os.access(run_dir, os.W_OK):
            raise RunDirError(f"run.dir {run_dir} is not writable")
        return True
    existing = run_dir
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise RunDirError(f"run.dir {run_dir} cannot be created: {existing} is not a writable directory")
    if run_dir.exists() and any(not p.name.endswith(".tmp") and p.name != LOCK_FILE for p in run_dir.iterdir()):
        raise RunDirError(f"run.dir {run_dir} is not empty and holds no evo run")
    return False

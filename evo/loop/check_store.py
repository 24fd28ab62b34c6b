"""References that passed their check, kept in the run so a resume on the same host runs them only
in its evaluations.

A start runs every task's reference alone on each shape set (``check_task``) before the task is
searched.  On a resume that costs minutes where the problems are large (KernelBench's level 1
builds inputs of gigabytes: the last of 32 tasks joined 185 s after a resume on an H100,
experiments/kernelbench_search.md section 22), and it says again what it said before.  A check
that passed is stored in the archive's ``meta`` table under the task's name and the hash of its
files (``check.<task>.<files hash>``) with the environment it ran in (GPU models, torch);
a later start in the same environment, on the same files, takes it instead of checking again.
A failed check is never stored: the task is set aside, and tried again once its files change.

    stored_check(archive, task, environment) -> TaskCheck | None   # Archive or ArchiveReader
    store_check(archive, task, check, environment)                 # a check that passed
"""
from __future__ import annotations

import json
import time

from evaluator import TaskCheck
from evo.core.task import Task

CHECK_META = "check."


def check_key(task: Task) -> str:
    return f"{CHECK_META}{task.name}.{task.files_hash}"


def stored_check(archive, task: Task, environment: str) -> TaskCheck | None:
    """The passed check stored for ``task``'s current files in ``environment``, else None."""
    if not environment:
        return None
    read = getattr(archive, "get_meta", None) or archive.meta
    value = read(check_key(task))
    if value is None:
        return None
    record = json.loads(value)
    if record.get("environment") != environment:
        return None
    return TaskCheck(ok=True, shapes=int(record.get("shapes", 0)), warnings=tuple(record.get("warnings", ())))


def store_check(archive, task: Task, check: TaskCheck, environment: str) -> None:
    """Keep ``check`` (a passed one, in ``environment``) for a later start of the run."""
    if not (check.ok and environment):
        return
    archive.set_meta(check_key(task), json.dumps({
        "environment": environment, "shapes": check.shapes, "warnings": list(check.warnings),
        "stored_at": time.time()}))

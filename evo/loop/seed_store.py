"""Seeds derived for a run (or the reason none could be), kept in the run so no start derives one twice.

Deriving a seed from ``torch.compile`` costs minutes of GPU time per task.  Each outcome is stored in
the archive's ``meta`` table under the task's name and the hash of its problem source
(``seed.<task>.<source hash>``): a later start of the same run, on the same source, takes the stored
seed, or the stored failure, instead of deriving again.  A problem file whose source changed has
another hash, so its seed is derived anew.

    stored_seed(archive, task) -> StoredSeed | None     # Archive, or a read-only ArchiveReader
    store_seed(archive, task, source=...)               # a derived seed kernel
    store_seed(archive, task, error=...)                # why none could be derived
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from evo.core.task import Task

SEED_META = "seed."


@dataclass(frozen=True)
class StoredSeed:
    source: str | None  # the derived seed kernel (a candidate defining ModelNew)
    error: str | None  # or why deriving one failed
    stored_at: float
    origin: str = ""  # where it was derived, where not by this run (evo.loop.borrow)
    environment: str = ""  # the GPU models and torch it was derived with ("": not recorded)

    @property
    def ok(self) -> bool:
        return self.source is not None

    def message(self, task: Task) -> str:
        """Why the task has no seed, for a start that does not try again."""
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.stored_at))
        return (f"deriving a seed for task {task.name} from torch.compile failed on an earlier start of this run "
                f"({when}; not tried again while {task.path} is unchanged): {self.error}")


def seed_key(task: Task) -> str:
    return f"{SEED_META}{task.name}.{task.source_hash}"


def stored_seed(archive, task: Task) -> StoredSeed | None:
    """The outcome stored for ``task``'s current source, or None where its seed was never derived.

    ``archive``: an :class:`archive.Archive` or a read-only :class:`archive.queries.ArchiveReader`.
    """
    read = getattr(archive, "get_meta", None) or archive.meta
    value = read(seed_key(task))
    if value is None:
        return None
    record = json.loads(value)
    return StoredSeed(source=record.get("source"), error=record.get("error"), stored_at=record["stored_at"],
                      environment=record.get("environment", ""))


def store_seed(archive, task: Task, *, source: str | None = None, error: str | None = None,
               environment: str = "") -> StoredSeed:
    """Store what deriving ``task``'s seed gave: its ``source``, or the ``error`` that stopped it;
    ``environment``: the host's GPU models and torch (evaluator.device.gpu_environment), which
    inductor's autotuning chose the seed's configurations for."""
    if (source is None) == (error is None):
        raise ValueError("store_seed takes a derived source or an error, one of the two")
    record = StoredSeed(source=source, error=error, stored_at=time.time(), environment=environment)
    archive.set_meta(seed_key(task), json.dumps({"source": source, "error": error, "stored_at": record.stored_at,
                                                 "environment": environment}))
    return record

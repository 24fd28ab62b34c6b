"""Another run's preparation taken by this one: ``run.seeds_from=DIR``.

Preparing a task costs GPU minutes that say nothing new when an earlier run on this host prepared
the same problem: deriving a GEMM's seed with max-autotune took 80-470 s a task on an H100, and a
run of 32 KernelBench problems 478 s before its last task joined (experiments/kernelbench_search.md
section 22).  A second search of the same problems (another tolerance, other operators, an LLM)
names the first run's directory, and a task whose problem source the two runs share takes:

- its **seed** derived from torch.compile, where that run derived one in this host's environment,
  since inductor's autotuning chose its configurations for those GPUs (a seed stored without one,
  by an engine before 2026-11-28, is taken too; a failure there is tried again here, since it
  may have been the GPU's memory or a timeout);
- its reference's passed **check**, where that run stored one in this host's environment (GPU
  models and torch's version: evo.loop.check_store).

What is taken is stored in this run as if it were prepared here, so a resume needs neither the
other run nor the key (``run.seeds_from`` is this start's alone, never saved).  The other run is
only read: it may be running still.

    borrowed = Borrowed.open(dir, environment)      # ConfigError where DIR holds no run
    borrowed.seed(task) -> StoredSeed | None        # also kept in borrowed.seeds
    borrowed.check(task) -> TaskCheck | None        # also kept in borrowed.checks
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from evaluator import TaskCheck
from evo.core.errors import ConfigError
from evo.core.run_dir import RUN_FILE
from evo.core.task import Task
from evo.loop.check_store import stored_check
from evo.loop.seed_store import StoredSeed, stored_seed


class Borrowed:
    def __init__(self, reader, run_dir: Path, environment: str):
        self.reader, self.run_dir, self.environment = reader, run_dir, environment
        self.seeds: dict[str, StoredSeed] = {}  # task name -> the seed taken
        self.checks: dict[str, TaskCheck] = {}  # task name -> the check taken

    @classmethod
    def open(cls, run_dir: str | Path, environment: str) -> Borrowed:
        from archive.queries import open_reader

        path = Path(run_dir).expanduser().resolve()
        archive = path / "archive.db"
        if not (path / RUN_FILE).is_file() or not archive.is_file():
            raise ConfigError(f"run.seeds_from={run_dir}: {path} holds no run (no {RUN_FILE} and archive.db)")
        reader = open_reader(f"sqlite:///{archive}")
        if reader is None:
            raise ConfigError(f"run.seeds_from={run_dir}: {archive} cannot be read as a run's archive")
        return cls(reader, path, environment)

    def seed(self, task: Task) -> StoredSeed | None:
        taken = stored_seed(self.reader, task)
        if taken is None or not taken.ok or taken.environment not in ("", self.environment):
            return None
        taken = dataclasses.replace(taken, origin=f"the run in {self.run_dir}")
        self.seeds[task.name] = taken
        return taken

    def check(self, task: Task) -> TaskCheck | None:
        taken = stored_check(self.reader, task, self.environment)
        if taken is not None:
            self.checks[task.name] = taken
        return taken

    def close(self) -> None:
        self.reader.close()


def first_found(*lookups):
    """One lookup from several (None entries skipped): the first answer that is not None."""
    present = [lookup for lookup in lookups if lookup is not None]
    if not present:
        return None

    def lookup(task: Task):
        for each in present:
            found = each(task)
            if found is not None:
                return found
        return None
    return lookup

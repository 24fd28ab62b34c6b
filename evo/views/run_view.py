"""A finished or running run, opened for reading: ``evo status``, ``evo report`` and ``evo export``.

Nothing here writes to the run dir or takes its ``.lock``: the archive is
opened read-only (:class:`archive.queries.ArchiveReader`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from archive.queries import ArchiveReader
from evo.core.descriptors import Descriptor, by_names, grid_size
from evo.core.errors import EvoError, RunDirError
from evo.core.hydra_nodes import current_targets, instantiate_node
from evo.core.run_dir import RUN_FILE
from evo.core.task import Task


@dataclass
class RunView:
    dir: Path
    info: dict  # run.json
    config: object  # the run's config.yaml (an OmegaConf node)
    descriptors: tuple[Descriptor, ...]  # their continuous variants for a CVT archive
    archive: ArchiveReader
    cvt_cells: int = 0  # 0: a grid archive

    @property
    def tasks(self) -> list[str]:
        return list(self.info.get("tasks", []))

    def close(self) -> None:
        self.archive.close()

    def __enter__(self) -> "RunView":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def task_rows(self) -> list[dict]:
        """Per task: programs, evaluations, correct, seed and best speedup, cells, coverage, QD-score; the
        fastest kernel's time, torch.compile's for the same shapes, and the roofline's floor and bound."""
        counts = self.archive.task_counts()
        size = self.cvt_cells or grid_size(self.descriptors)
        rows = []
        for name in self.tasks:
            fitness = list(self.archive.cell_fitness(name).values())
            row = counts.get(name, dict(programs=0, evaluations=0, correct=0, seed_speedup=None))
            best = next(iter(self.archive.best_kernels(name, 1)), {})
            rows.append(dict(row, task=name, cells=len(fitness), coverage=len(fitness) / size,
                             qd_score=float(sum(fitness)), best_speedup=max(fitness) if fitness else None,
                             best_ms=best.get("runtime_ms"), compiled_ms=best.get("compiled_runtime_ms"),
                             floor_ms=best.get("floor_ms"), bound=best.get("roofline_bound")))
        return rows

    def load_tasks(self) -> list[Task]:
        """The run's tasks, read again from the problem files its config names."""
        tasks = instantiate_node(self.config.task, "task")
        by_name = {t.name: t for t in tasks}
        missing = [n for n in self.tasks if n not in by_name]
        if missing:
            raise EvoError(f"the problem files of task {', '.join(missing)} named in {self.dir / 'config.yaml'} "
                           "are gone")
        return [by_name[n] for n in self.tasks]


def open_run(run_dir: str | Path) -> RunView:
    """Open a run dir read-only; a clear :class:`RunDirError` when it holds no run or no archive."""
    run_dir = Path(run_dir).expanduser().resolve()
    if not run_dir.is_dir():
        raise RunDirError(f"run dir {run_dir} does not exist")
    marker = run_dir / RUN_FILE
    if not marker.is_file():
        raise RunDirError(f"{run_dir} holds no evo run (no {RUN_FILE})")
    try:
        info = json.loads(marker.read_text())
        config = OmegaConf.create(current_targets((run_dir / "config.yaml").read_text(encoding="utf-8")))
        cvt_cells = int(config.archive.get("cvt_cells") or 0)
        descriptors = by_names(config.archive.descriptors, continuous=cvt_cells > 0)
        url = config.archive.get("url")
    except (ValueError, KeyError, OSError, AttributeError) as exc:
        raise RunDirError(f"cannot read the run in {run_dir}: {exc}") from None
    if url and not str(url).startswith("sqlite"):
        archive = ArchiveReader(url=str(url))
    else:
        path = Path(str(url).split("///", 1)[1]) if url else run_dir / "archive.db"
        if not path.is_file():
            raise RunDirError(f"run dir {run_dir} has no archive ({path} is missing): the run never started")
        archive = ArchiveReader(path=path)
    return RunView(dir=run_dir, info=info, config=config, descriptors=descriptors, archive=archive,
                   cvt_cells=cvt_cells)

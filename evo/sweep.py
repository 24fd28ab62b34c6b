"""A Hydra callback that sums up a multirun sweep: one row per job, in the sweep dir.

Each sweep job is one ``evo run`` with its own run dir (``hydra.sweep.dir``/N).
When the sweep ends, ``summary.md`` and ``summary.json`` beside those run dirs
list every job's overrides and, per task, its best speedup and coverage.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback


class SweepSummary(Callback):
    def __init__(self) -> None:
        self.jobs: list[dict] = []

    def on_job_end(self, config: Any, job_return: JobReturn, **kwargs: Any) -> None:
        job = {"num": len(self.jobs), "overrides": list(job_return.overrides or []),
               "run_dir": str(config.run.dir)}
        if job_return.status == JobStatus.COMPLETED:
            job["tasks"] = job_return.return_value or []
        else:
            job["error"] = f"{type(job_return._return_value).__name__}: {job_return._return_value}"
        self.jobs.append(job)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not self.jobs or not sweep_dir.is_dir():
            return
        (sweep_dir / "summary.json").write_text(json.dumps(self.jobs, indent=1, default=str))
        (sweep_dir / "summary.md").write_text(summary_markdown(self.jobs))


def summary_markdown(jobs: list[dict]) -> str:
    tasks = sorted({row["task"] for job in jobs for row in job.get("tasks", [])})
    lines = ["| job | overrides | " + " | ".join(f"{t} best (coverage)" for t in tasks) + " |",
             "| ---: | --- | " + " | ".join("---:" for _ in tasks) + " |"]
    for job in jobs:
        by_task = {row["task"]: row for row in job.get("tasks", [])}
        cells = []
        for task in tasks:
            row = by_task.get(task)
            best = row and row.get("best_speedup")
            cells.append(f"{best:.3f}x ({row['coverage']:.1%})" if best else "-")
        if "error" in job:
            cells = [f"failed: {job['error'][:80]}"] + [""] * (len(tasks) - 1)
        lines.append(f"| {job['num']} | {' '.join(job['overrides'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

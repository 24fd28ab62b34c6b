"""The end-of-run table: per task, evaluations, correct, speedups, coverage."""
from __future__ import annotations

from rich.table import Table

from archive import Archive


def summary_rows(archive: Archive, task_names: list[str]) -> list[dict]:
    return [dict(task=name, **archive.stats(name)) for name in task_names]


def _x(value: float | None) -> str:
    return f"{value:.3f}x" if value is not None else "-"


def summary_table(rows: list[dict], *, title: str) -> Table:
    table = Table(title=title, caption="seed, best: speedup over the PyTorch reference")
    for column in ("task", "evals", "correct", "seed", "best", "cells", "coverage"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for r in rows:
        table.add_row(r["task"], str(r["evaluations"]), str(r["correct"]), _x(r["seed_speedup"]),
                      _x(r["best_speedup"]), str(r["cells"]), f"{100 * r['coverage']:.1f}%")
    return table

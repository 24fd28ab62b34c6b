"""Figures comparable with published ones: KernelBench's fast_p, and geometric-mean speedups.

fast_p, as KernelBench defines it, is the share of a level's tasks that have a
correct kernel faster than the eager reference by more than ``p``
(``fast_0``: the share with a correct kernel).  Tasks are grouped by the folder
of their problem file (``level1``, ``level2``, ...); a task set aside counts, as
a task without a correct kernel.  Each task contributes its fastest correct
kernel (by speedup over eager); that kernel's speedup over ``torch.compile``
(where it was timed against it) gives fast_p over ``torch.compile``.  The
geometric means are KernelBench's, over the tasks that have a correct kernel,
and, over every task, one that counts a task without a correct kernel as 1.0x:
the user keeps the baseline it is compared with.
"""
from __future__ import annotations

import math
from pathlib import Path

from evaluator import EvaluatorSettings
from evo.core.errors import EvoError
from evo.views.run_view import RunView

P_VALUES = (0.0, 1.0, 1.5, 2.0)
TOLERANCE_NOTES = {
    "strict": "strict tolerances (the engine's default: fp32 1e-4, fp16 1e-2, bf16 2e-2, or the task's own)",
    "kernelbench": "KernelBench's published tolerances (atol = rtol = 1e-2 where the task sets none), "
                   "references and baselines in PyTorch's default precision (cuDNN convolutions in TF32)",
}


def task_groups(run: RunView) -> dict[str, str]:
    """task -> the name of its problem file's folder (the run's tasks read again from their files)."""
    try:
        return {t.name: Path(t.path).parent.name for t in run.load_tasks()}
    except EvoError:  # the files are gone: one group
        return {name: "tasks" for name in run.tasks}


def task_bests(run: RunView) -> list[dict]:
    """Per task: its group, and its fastest correct kernel's speedups (None without one)."""
    groups, aside = task_groups(run), run.archive.set_aside()
    rows = []
    for name in run.tasks:
        best = run.archive.best_kernels(name, 1)
        rows.append(dict(task=name, group=groups.get(name, "tasks"), set_aside=name in aside,
                         speedup=best[0]["speedup"] if best else None,
                         speedup_vs_compiled=best[0]["speedup_vs_compiled"] if best else None))
    return rows


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def fast_p_rows(bests: list[dict]) -> list[dict]:
    """Per group (and ``all`` when there are several): tasks, fast_p for each p of ``P_VALUES`` over eager
    and over torch.compile (None where no kernel was timed against it), and the geometric means over
    eager and over torch.compile with the number of tasks behind each, and over every task (``_all``)."""
    groups: dict[str, list[dict]] = {}
    for row in bests:
        groups.setdefault(row["group"], []).append(row)
    if len(groups) > 1:
        groups["all"] = list(bests)
    out = []
    for group, rows in groups.items():
        speedups = [r["speedup"] for r in rows if r["speedup"] is not None]
        compiled = [r["speedup_vs_compiled"] for r in rows if r["speedup"] is not None]
        timed = [c for c in compiled if c is not None]
        out.append(dict(
            group=group, tasks=len(rows), set_aside=sum(r["set_aside"] for r in rows),
            fast_p={p: sum(s > p for s in speedups) / len(rows) for p in P_VALUES},
            fast_p_compiled={p: sum(c > p for c in timed) / len(rows) for p in P_VALUES} if timed else None,
            geomean=_geomean(speedups), geomean_n=len(speedups),
            geomean_compiled=_geomean(compiled), geomean_compiled_n=len(timed),
            geomean_all=_geomean(speedups + [1.0] * (len(rows) - len(speedups))),
            geomean_compiled_all=_geomean(timed + [1.0] * (len(rows) - len(speedups))) if timed else None))
    return out


def tolerance_of(run: RunView) -> str:
    """The run's ``evaluator.tolerance``; a run made before the key existed ran with its default."""
    return str(run.config.evaluator.get("tolerance") or EvaluatorSettings.tolerance)

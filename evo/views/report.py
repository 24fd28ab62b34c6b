"""`evo report`: plots (PNG) and one self-contained HTML page for a run.

The page (``report.html``, from ``templates/report.html.jinja``) embeds every
plot as base64 and loads nothing from anywhere else.  Sections: the task
table, best speedup over time, QD-score and coverage over time (the
archive's ``stats_history``), an archive heatmap per task (a grid archive's
descriptor grid; a CVT archive's centroids projected on two descriptor axes),
fast_p and geometric-mean speedups per folder of tasks, the tasks set aside with why,
each task's speedup per shape set where the run timed them
(``evaluator.time_shapes=all``), operator and LLM model success rates, LLM
cost over time, and the lineage of each task's best kernel with the diffs along
it.  Reads the run read-only (see ``run_view``).
"""
from __future__ import annotations

import base64
import difflib
import io
import time
from pathlib import Path

import jinja2
import numpy as np
from matplotlib.figure import Figure

from evo.core.descriptors import parse_cell_key
from evo.core.layouts import CVT
from evo.core.shape_buckets import best_per_bucket, speedups_by_program
from evo.views.fast_p import (
    P_VALUES,
    TOLERANCE_NOTES,
    fast_p_rows,
    task_bests,
    tolerance_of,
)
from evo.views.run_view import RunView

TEMPLATES = Path(__file__).parents[1] / "templates"
MAX_DIFF_LINES = 400  # per step of a lineage


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def _figure(width: float = 8, height: float = 3.6, columns: int = 1):
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(1, columns, squeeze=False)[0]
    return fig, list(axes)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")


def best_speedup_plot(run: RunView, start: float) -> bytes:
    fig, (ax,) = _figure()
    for task in run.tasks:
        points = run.archive.correct_timeline(task)
        if points:
            minutes = [(p["created_at"] - start) / 60 for p in points]
            best = np.maximum.accumulate([p["speedup"] for p in points])
            ax.step(minutes, best, where="post", marker=".", label=task)
    if ax.lines:
        ax.legend(fontsize="small")
    else:
        _empty(ax, "no correct evaluation yet")
    ax.set(xlabel="minutes since the run started", ylabel="best speedup (x)", title="Best speedup over time")
    return _png(fig)


def qd_plot(run: RunView) -> bytes:
    fig, (qd, coverage) = _figure(11, 3.6, 2)
    for task in run.tasks:
        rows = run.archive.stats_history(task)
        if rows:
            x = [r["children_done"] for r in rows]
            qd.plot(x, [r["qd_score"] for r in rows], marker=".", label=task)
            coverage.plot(x, [100 * r["coverage"] for r in rows], marker=".", label=task)
    for ax, label in ((qd, "QD-score (sum of elite speedups)"), (coverage, "coverage (% of cells)")):
        ax.set(xlabel="children evaluated", ylabel=label)
        if ax.lines:
            ax.legend(fontsize="small")
        else:
            _empty(ax, "no statistics recorded yet")
    fig.suptitle("QD-score and coverage over time (all islands)")
    return _png(fig)


def heatmap_plot(run: RunView, task: str) -> bytes:
    """The task's archive coloured by elite speedup: a CVT's cells, or the descriptor grid."""
    if run.cvt_cells:
        return cvt_plot(run, task)
    return grid_plot(run, task)


def grid_plot(run: RunView, task: str) -> bytes:
    """The task's descriptor grid (first two descriptors; the best over any others), coloured by speedup."""
    d = run.descriptors
    x_desc, y_desc = d[0], (d[1] if len(d) > 1 else None)
    grid = np.full((len(y_desc.bins) if y_desc else 1, len(x_desc.bins)), np.nan)
    for key, fitness in run.archive.cell_fitness(task).items():
        values = parse_cell_key(key)
        if values.get(x_desc.name) not in x_desc.bins:
            continue
        col = x_desc.bins.index(values[x_desc.name])
        row = y_desc.bins.index(values[y_desc.name]) if y_desc and values.get(y_desc.name) in y_desc.bins else 0
        grid[row, col] = np.fmax(grid[row, col], fitness)
    fig, (ax,) = _figure(7, 3.2)
    image = ax.imshow(grid, cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(len(x_desc.bins)), x_desc.bins, rotation=45, fontsize="small")
    ax.set_yticks(range(grid.shape[0]), y_desc.bins if y_desc else [""], fontsize="small")
    ax.set(xlabel=x_desc.name, ylabel=y_desc.name if y_desc else "", title=f"{task}: elite speedup per cell")
    fig.colorbar(image, ax=ax, label="speedup (x)")
    if np.isnan(grid).all():
        _empty(ax, "no elite yet")
    return _png(fig)


def cvt_projection(run: RunView, task: str) -> dict:
    """A CVT archive's centroids on the two descriptor axes along which the task's filled cells vary most.

    Returns x, y (one per cell), speedup (the cell's elite's best over islands; NaN when empty),
    and the axes' descriptor names.  With one descriptor every y is 0.
    """
    centroids = np.asarray(run.archive.centroids(), dtype=float).reshape(-1, len(run.descriptors))
    speedup = np.full(len(centroids), np.nan)
    for key, fitness in run.archive.cell_fitness(task).items():
        cell = CVT.index(key)
        if cell is not None and cell < len(centroids):
            speedup[cell] = np.fmax(speedup[cell], fitness)
    filled = ~np.isnan(speedup)
    spread = centroids[filled].std(axis=0) if filled.sum() > 1 else np.zeros(centroids.shape[1])
    axes = sorted(np.argsort(-spread, kind="stable")[:2])  # ties (nothing filled yet): the first descriptors
    y = centroids[:, axes[1]] if len(axes) > 1 else np.zeros(len(centroids))
    return dict(x=centroids[:, axes[0]], y=y, speedup=speedup, axes=[run.descriptors[a].name for a in axes])


def cvt_plot(run: RunView, task: str) -> bytes:
    cells = cvt_projection(run, task)
    filled = ~np.isnan(cells["speedup"])
    fig, (ax,) = _figure(7, 3.2)
    ax.scatter(cells["x"][~filled], cells["y"][~filled], s=14, color="#bbbbbb", label="empty cell")
    points = ax.scatter(cells["x"][filled], cells["y"][filled], c=cells["speedup"][filled], cmap="viridis", s=40,
                        edgecolors="black", linewidths=0.4)
    fig.colorbar(points, ax=ax, label="speedup (x)")
    others = len(run.descriptors) - len(cells["axes"])
    ax.set(xlim=(-0.03, 1.03), ylim=(-0.03, 1.03) if len(cells["axes"]) > 1 else (-1, 1), xlabel=f"{cells['axes'][0]} (scaled to 0..1)",
           ylabel=f"{cells['axes'][1]} (scaled to 0..1)" if len(cells["axes"]) > 1 else "",
           title=f"{task}: elite speedup per CVT cell ({int(filled.sum())} of {len(filled)} filled"
                 + (f"; {others} more descriptor{'s' * (others > 1)} not shown)" if others else ")"))
    if not len(filled):
        _empty(ax, "no centroids stored")
    elif not filled.any():
        _empty(ax, "no elite yet")
    return _png(fig)


def shape_rows(run: RunView, task: str) -> list[dict]:
    """Per timed shape set (shape bucket) of the task: the fastest kernel there, and how the task's best
    kernel (the fastest on the timing shape) does there.  Empty without shape timings."""
    speedups = speedups_by_program(run.archive.shape_timings(task))
    best = run.archive.best_kernels(task, 1)
    overall = {s.bucket: s.speedup for s in speedups.get(best[0]["id"], [])} if best else {}
    return [dict(shape=bucket.name, numel=bucket.numel, program=program, speedup=s.speedup, noise=s.speedup_noise,
                 best_program=best[0]["id"] if best else None, best_speedup=overall.get(bucket))
            for bucket, [(program, s)] in best_per_bucket(speedups).items()]


def rates_plot(rows: list[dict], name: str, title: str) -> bytes:
    fig, (ax,) = _figure(7, 0.5 + 0.45 * max(len(rows), 1))
    labels = [r[name] for r in rows]
    ax.barh(labels, [100 * (r["rate"] or 0) for r in rows], color="tab:green")
    for i, r in enumerate(rows):
        whole = r["evaluated"] + r["rejected"] if "evaluated" in r else r["calls"]
        ax.text(1, i, f"{r['correct']}/{whole}", va="center", fontsize="small")
    ax.set(xlim=(0, 100), xlabel="correct (%)", title=title)
    return _png(fig)


def cost_plot(run: RunView, start: float) -> bytes | None:
    rows = run.archive.cost_timeline()
    if not rows:
        return None
    fig, (ax,) = _figure()
    ax.step([(r["created_at"] - start) / 60 for r in rows], np.cumsum([r["cost_usd"] for r in rows]), where="post")
    ax.set(xlabel="minutes since the run started", ylabel="LLM cost (USD, cumulative)", title="LLM cost over time")
    return _png(fig)


def lineage_steps(run: RunView, task: str) -> list[dict]:
    """The best kernel's ancestry, oldest first, each step with its diff from the previous one and the
    prompts of the LLM calls that made it (what the model was told: the parent's profile among it)."""
    best = run.archive.best_kernels(task, 1)
    if not best:
        return []
    ids = run.archive.lineage(best[0]["id"])
    programs, prompts = run.archive.programs(ids), run.archive.prompts(ids)
    steps, previous = [], None
    for pid in ids:
        p = programs[pid]
        diff = []
        if previous is not None:
            diff = list(difflib.unified_diff(previous["source"].splitlines(), p["source"].splitlines(),
                                             f"program {previous['id']}", f"program {pid}", lineterm=""))
        steps.append(dict(id=pid, operator=p["operator"], generation=p["generation"], island=p["island"],
                          status=p["status"] or "not evaluated", speedup=p["speedup"],
                          diff=diff[:MAX_DIFF_LINES], diff_cut=max(0, len(diff) - MAX_DIFF_LINES),
                          source=p["source"] if previous is None else None,
                          prompts=[c for c in prompts.get(pid, []) if c["prompt"]]))
        previous = p
    return steps


def write_report(run: RunView, out: Path) -> Path:
    """Write the PNGs and ``report.html`` into ``out``; returns the page's path."""
    out = out.expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    start = run.archive.started_at() or time.time()
    operators, models = run.archive.operator_rates(), run.archive.model_rates()
    images: dict[str, bytes | None] = {
        "best_speedup": best_speedup_plot(run, start),
        "qd": qd_plot(run),
        **{f"heatmap_{task}": heatmap_plot(run, task) for task in run.tasks},
        "operators": rates_plot(operators, "operator", "Operators: correct children") if operators else None,
        "models": rates_plot(models, "model", "LLM models: calls whose child was correct") if models else None,
        "cost": cost_plot(run, start),
    }
    for name, png in images.items():
        if png is not None:
            (out / f"{name}.png").write_bytes(png)
    embedded = {name: base64.b64encode(png).decode() if png else None for name, png in images.items()}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    page = env.get_template("report.html.jinja").render(
        run_dir=str(run.dir), device=run.info.get("device", "?"), images=embedded, tasks=run.task_rows(),
        operators=operators, models=models, spend=run.archive.llm_spend(),
        children=run.archive.child_evaluation_count(), rejected=sum(run.archive.rejections().values()),
        descriptors=[d.name for d in run.descriptors],
        lineages={task: lineage_steps(run, task) for task in run.tasks},
        shapes={task: rows for task in run.tasks if (rows := shape_rows(run, task))},
        fast_p=fast_p_rows(task_bests(run)), p_values=P_VALUES,
        tolerance=TOLERANCE_NOTES.get(tolerance_of(run), tolerance_of(run)), set_aside=run.archive.set_aside(),
        generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path

"""GPU memory of an evaluation against what the reference alone needs, on KernelBench problems.

For each problem file (unchanged): its references checked and a seed derived from torch.compile
(``Evaluator.prepare``, several at once), then the seed evaluated as the engine evaluates any
candidate; per problem: the reference's peak (parameters, one input set, output, workspace), the
evaluation's peak and their ratio (target: at most 3), status, speedups and wall time.

    python -m experiments.kernelbench_memory PROBLEM.py ... --out results.json [--markdown results.md]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from evaluator import Evaluator, EvaluatorSettings, Preparation
from evo.core.task import load_task


def measure(paths: list[str], settings: EvaluatorSettings) -> list[dict]:
    tasks = [load_task(p) for p in paths]
    evaluator = Evaluator(settings, "cuda", 0)
    rows = []
    try:
        began = time.monotonic()
        prepared = evaluator.prepare([Preparation(t.name, t.source, False) for t in tasks],
                                     evaluator.prepare_workers)
        # The seeds come from torch.compile of the reference; a reference class that names itself
        # (super(Model, self)) is compiled as super() here: the candidate is inductor's Triton either way,
        # and it is evaluated against the unchanged problem file.
        seeds = evaluator.prepare([Preparation(t.name, t.source.replace("super(Model, self)", "super()"), True)
                                   for t in tasks if not t.seeds], evaluator.prepare_workers)
        prepare_s = time.monotonic() - began
        for task in tasks:
            check, seed = prepared[task.name].check, seeds[task.name].seed if task.name in seeds else None
            row = dict(task=task.name, reference_ok=check.ok, reference_peak_mb=check.memory.get("reference_peak_mb"),
                       device_mb=check.memory.get("device_mb"), prepare_s=round(prepare_s, 1))
            source = task.seeds[0] if task.seeds else (seed.source if seed else None)
            if not check.ok:
                row.update(status="set aside", reason=check.error)
            elif source is None:
                row.update(status="no seed", reason=seed.error if seed else None)
            else:
                result = evaluator.evaluate(task.name, task.source, source)
                memory = result.extra.get("memory") or {}
                row.update(status=result.status.value, reason=result.reason[:300], speedup=result.speedup,
                           speedup_vs_compiled=result.speedup_vs_compiled, wall_s=round(result.wall_s, 1),
                           eval_peak_mb=memory.get("peak_mb"), task_peak_mb=memory.get("task_peak_mb"),
                           eval_reference_peak_mb=memory.get("reference_peak_mb"),
                           ratio=memory.get("ratio"), reserved_mb=memory.get("reserved_mb"),
                           phases=result.extra.get("phases"))
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        evaluator.close()
    return rows


def markdown(rows: list[dict]) -> str:
    def f(value, spec=".1f"):
        return format(value, spec) if isinstance(value, (int, float)) else "-"

    lines = ["| problem | status | reference peak (MB) | evaluation peak (MB) | without the L2 flush buffer (MB) "
             "| ratio | speedup | vs compile | wall (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['status']} | {f(r.get('eval_reference_peak_mb') or r.get('reference_peak_mb'))} "
                     f"| {f(r.get('eval_peak_mb'))} | {f(r.get('task_peak_mb'))} | {f(r.get('ratio'), '.2f')} | {f(r.get('speedup'), '.3f')} "
                     f"| {f(r.get('speedup_vs_compiled'), '.3f')} | {f(r.get('wall_s'))} |")
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    if ratios:
        lines.append(f"\nlargest ratio {max(ratios):.2f} over {len(ratios)} evaluations (target: at most 3)")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--markdown")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    rows = measure(args.problems, EvaluatorSettings(device="cuda", timeout_s=args.timeout))
    Path(args.out).write_text(json.dumps(rows, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()

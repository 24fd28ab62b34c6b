"""Evaluate every built-in seed on this machine's device and print a table.

    python experiments/seed_report.py [--device cuda] [--out FILE]

Per task: status, candidate and reference medians, speedup, timing spread, and
the compiled facts of the launched kernels (registers per thread, spills,
shared memory, warps, stages; GPU only).
"""
from __future__ import annotations

import argparse
import platform
from pathlib import Path

from evaluator import Evaluator, EvaluatorSettings, resolve_device
from evo.core.task import load_tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device, _ = resolve_device(args.device)
    evaluator = Evaluator(EvaluatorSettings(device=device, timeout_s=300), device, 0 if device == "cuda" else None)
    lines = ["| task | status | seed (ms) | reference (ms) | speedup | spread | registers | spills | shared (B) "
             "| warps | stages | wall (s) |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    name = ""
    try:
        for task in load_tasks("default"):
            r = evaluator.evaluate(task.name, task.source, task.seeds[0])
            name = r.device or name
            fmt = lambda v, f="{:.4f}": "-" if v is None else f.format(v)  # noqa: E731
            lines.append(f"| {task.name} | {r.status.value} | {fmt(r.runtime_ms)} | {fmt(r.ref_runtime_ms)} | "
                         f"{fmt(r.speedup, '{:.3f}x')} | {fmt(r.runtime_spread, '{:.1%}')} | {fmt(r.registers, '{}')} | "
                         f"{fmt(r.spills, '{}')} | {fmt(r.shared_bytes, '{}')} | {fmt(r.num_warps, '{}')} | "
                         f"{fmt(r.num_stages, '{}')} | {r.wall_s:.1f} |")
            print(lines[-1], flush=True)
    finally:
        evaluator.close()
    text = f"Device: {name}; Python {platform.python_version()}\n\n" + "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()

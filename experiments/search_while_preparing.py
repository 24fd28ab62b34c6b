"""When the first children come: `evo run` searching while its other tasks are prepared, against
preparing every task first (issue 16, deliverable 4).

    python3 experiments/search_while_preparing.py --tasks DIR --budget 40 --out $OUT/swp \\
        [--mode early:run.search_while_preparing=true --mode barrier:run.search_while_preparing=false] \\
        [-- more evo run overrides]

Each mode is one fresh `evo run` over the problem files of ``--tasks`` (seeds derived from
torch.compile, evaluated, then children of the constants operator), one after the other.  From its
``events.jsonl`` and the time the command was started: when the first evaluation and the first
child came back, when the last task joined the search (``task_joined``; with every task prepared
first, the loop's ``start``), the children evaluated before that, and the whole run's wall time.
Writes ``search_while_preparing.json`` and ``.md`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def one_run(name: str, overrides: list[str], tasks: str, budget: int, out: Path, extra: list[str],
            device: str = "cuda", timeout_s: float | None = None) -> dict:
    run_dir = out / f"run_{name}"
    command = [sys.executable, "-m", "evo.cli", "run", f"run.dir={run_dir}", f"task.path={tasks}",
               f"run.budget.evaluations={budget}", "run.progress=false", f"evaluator.device={device}",
               *overrides, *extra]
    began = time.time()
    with open(out / f"run_{name}.log", "w") as log:
        try:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            code = "timed out"
    wall = time.time() - began
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    start = next(e["t"] for e in events if e["event"] == "start")
    evaluated = [e for e in events if e["event"] == "evaluated"]
    children = [e for e in evaluated if e["operator"] != "seed"]
    joined = [e["t"] for e in events if e["event"] == "task_joined"]
    all_in = max([start, *joined])  # the last task in the search
    best: dict[str, float] = {}
    for e in evaluated:
        if e["status"] == "correct" and e.get("speedup"):
            best[e["task"]] = max(best.get(e["task"], 0.0), e["speedup"])
    return {
        "mode": name, "overrides": overrides, "exit": code, "wall_s": round(wall, 1),
        "search_start_s": round(start - began, 1),
        "first_evaluation_s": round(evaluated[0]["t"] - began, 1) if evaluated else None,
        "first_child_s": round(children[0]["t"] - began, 1) if children else None,
        "all_tasks_in_s": round(all_in - began, 1), "tasks_joined_later": len(joined),
        "children": len(children), "children_before_all_in": sum(e["t"] < all_in for e in children),
        "seeds_evaluated": len(evaluated) - len(children),
        "set_aside": sum(e["event"] == "task_set_aside" for e in events),
        "best_speedup": {k: round(v, 3) for k, v in sorted(best.items())},
        "command": " ".join(command[1:]),
    }


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# Searching while the tasks are prepared ({meta['device']})", "",
             f"{meta['tasks']} problem files from `{meta['path']}`, budget {meta['budget']} children.", "",
             "| mode | exit | first evaluation | first child | last task in | children before it | "
             "children | seeds evaluated | set aside | wall |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['exit']} | {r['first_evaluation_s']} s | {r['first_child_s']} s | "
                     f"{r['all_tasks_in_s']} s | {r['children_before_all_in']} | {r['children']} | "
                     f"{r['seeds_evaluated']} | {r['set_aside']} | {r['wall_s']} s |")
    lines += ["", "Best speedup per task:", ""]
    lines += [f"- {r['mode']}: " + ", ".join(f"{k} {v}x" for k, v in r["best_speedup"].items()) for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", action="append", default=[])
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of this script (the interpreter)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run (then it is stopped)")
    args = parser.parse_args(argv)
    modes = args.mode or ["early:run.search_while_preparing=true", "barrier:run.search_while_preparing=false"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        device = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        device = "no GPU"
    meta = {"device": device, "path": args.tasks, "budget": args.budget,
            "tasks": len(list(Path(args.tasks).glob("*.py"))), "extra": extra}
    rows = []
    for mode in modes:
        name, _, overrides = mode.partition(":")
        rows.append(one_run(name, [o for o in overrides.split(",") if o], args.tasks, args.budget, out, extra,
                            args.device, args.timeout))
        (out / "search_while_preparing.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))
        print(json.dumps(rows[-1]), flush=True)
    (out / "search_while_preparing.md").write_text(markdown(rows, meta))
    print(markdown(rows, meta))


if __name__ == "__main__":
    main()

"""Evaluations per GPU-minute and the GPU-busy share of a real `evo run` search (issue 16).

    python3 experiments/search_rate.py --tasks DIR --budget 80 --out $OUT/search [-- more evo run overrides]

One fresh `evo run` over the problem files of ``--tasks`` (their seeds beside them as ``seeds/NAME.py``,
or derived), the default configuration otherwise, while ``nvidia-smi`` samples the GPU's utilisation
every 100 ms, each sample stamped.  From the run's ``events.jsonl``: the search's window, from the
run loop's ``start`` to its ``done`` (Ray's and the workers' start-up before it left out, the
evaluations of seeds and children in it), its evaluations per minute, and the mean utilisation of
the samples taken in it.  Writes ``search_rate.json`` and ``.md`` under ``--out``.

Where the idle time is (``profile`` in the JSON): the busy share per tenth of the window; how long
0, 1, 2, ... evaluations were under way at once (each evaluation's span from the archive: recorded
at its end, ``phases.total_s`` long); and per task, the evaluations, their mean wall and their
mean seconds per phase.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from archive.queries import ArchiveReader, seconds_under_way
from gpu_busy import UtilisationSampler  # experiments/, beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--budget", type=int, default=80)
    parser.add_argument("--out", default="search_rate")
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("overrides", nargs="*", help="more evo run overrides (after --)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "run"
    command = [sys.executable, "-m", "evo.cli", "run", f"run.dir={run_dir}", f"task.path={args.tasks}",
               f"run.budget.evaluations={args.budget}", "run.progress=false", *args.overrides]
    sampler, began = UtilisationSampler(0), time.time()
    with open(out / "run.log", "w") as log:
        try:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            code = "timed out"
    sampler.stop()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    start = next(e["t"] for e in events if e["event"] == "start")
    end = next((e["t"] for e in events if e["event"] == "done"), events[-1]["t"])
    evaluated = [e for e in events if e["event"] == "evaluated"]
    done = next((e for e in events if e["event"] == "done"), {})
    figures = {
        "command": " ".join(command[1:]), "exit": code, "wall_s": round(time.time() - began, 1),
        "start_up_s": round(start - began, 1), "search_s": round(end - start, 1),
        "evaluations": len(evaluated), "children": sum(e["operator"] != "seed" for e in evaluated),
        "correct": sum(e["status"] == "correct" for e in evaluated),
        "per_gpu_minute": round(60 * len(evaluated) / (end - start), 2) if end > start else None,
        "gpu_busy": sampler.busy(start, end), "samples": len(sampler.samples),
        "peak_gpu_memory_mb": sampler.peak_memory_mb(start, end),
        "compiled_baseline_late": done.get("compiled_baseline_late"),
        "compiled_baseline_filled": done.get("compiled_baseline_filled"),
    }
    figures["profile"] = profile(run_dir / "archive.db", sampler, start, end)
    (out / "search_rate.json").write_text(json.dumps(figures, indent=1))
    busy = figures["gpu_busy"]
    (out / "search_rate.md").write_text(
        f"`{figures['command']}` (exit {code})\n\n{figures['evaluations']} evaluations ({figures['children']} "
        f"children, {figures['correct']} correct) in a search of {figures['search_s']} s after "
        f"{figures['start_up_s']} s of start-up: **{figures['per_gpu_minute']} per GPU-minute**, GPU busy "
        f"{'n/a' if busy is None else f'{100 * busy:.0f}%'} (nvidia-smi, {figures['samples']} samples)\n")
    print((out / "search_rate.md").read_text())


def profile(archive: Path, sampler: UtilisationSampler, start: float, end: float) -> dict:
    """Where the window's time went: see the module's docstring."""
    tenth = (end - start) / 10
    busy = [sampler.busy(start + i * tenth, start + (i + 1) * tenth) for i in range(10)]
    reader = ArchiveReader(path=archive)
    try:
        totals = reader.phase_totals()
    finally:
        reader.close()
    tasks = {name: {"evaluations": entry["evaluations"],
                    "mean_s": {k: round(v / entry["evaluations"], 3) for k, v in sorted(entry["seconds"].items())}}
             for name, entry in totals["tasks"].items()}
    under_way = seconds_under_way(totals["spans"], start, end)
    return {"busy_per_tenth": [None if b is None else round(b, 3) for b in busy],
            "seconds_with_k_under_way": {k: round(v, 1) for k, v in sorted(under_way.items())},
            "tasks": tasks}


if __name__ == "__main__":
    main()

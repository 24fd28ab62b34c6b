"""Evaluations per GPU-minute on KernelBench problems, where each evaluation's time goes, and how
busy the GPU was (issue 16).

    python3 experiments/throughput_bench.py .kb/level1/23_Softmax.py ... --seeds-from A.json [B.json] \\
        --variants 2 --mode live:compile_timing=live --mode cached:compile_timing=cached --out $OUT/tp

A task's variants race against its seed's speedup (``evaluator.race``), as children against their
parent in a search.  For each ``--mode NAME:key=value,...`` (fields of ``EvaluatorSettings``; ``timing.reps=...`` for
the timing settings) a fresh evaluator on GPU 0 scores every problem's seed (from the JSON of
``experiments/kernelbench_seeds.py``, or ``seeds/NAME.py`` beside the problem) and ``--variants``
variants of it (the tunable-constant operator, fixed RNG), round robin over the problems, one at a
time as ``evo run`` does with one GPU.  Per evaluation: the round trip, the harness's phases and
the time of its timed calls (GPU time).  ``nvidia-smi`` samples the GPU's utilisation every
100 ms while a mode runs (the GPU-busy share).  The target of issue 16, per problem: wall per
evaluation at most 1.5 x the timed calls' GPU time + 1 s.

With ``--blocks`` each problem's candidates run in a block of their own, the next problem starting
once the block's last evaluation is back: a problem's wall per evaluation is then its block's
elapsed time over its evaluations, pipeline included.  With ``--children-of-result`` as well, a
block scores its seed alone, then ``--variants`` children proposed from the seed and its result
(the operator then sees, say, that the seed spills registers), as a search's first generation.

Writes ``throughput.json`` (after every evaluation) and ``throughput.md`` under ``--out``.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from evaluator import Evaluator, EvaluatorSettings
from evo.core.program import Program
from gpu_busy import UtilisationSampler  # experiments/, beside this script
from operators import Context, TunableConstantMutation


DEVICE = "cuda"  # --device cpu: a smoke test of this script through Triton's interpreter


def parse_mode(text: str) -> tuple[str, EvaluatorSettings, bool]:
    """``NAME:key=value,...`` -> the name, the settings and ``late_baseline`` (default true, as in a
    search: a result does not wait for its task's torch.compile baseline)."""
    name, _, assignments = text.partition(":")
    settings, late = EvaluatorSettings(device=DEVICE, timeout_s=600), True
    nested: dict[str, dict] = {"timing": {}, "cpu_timing": {}}
    for item in filter(None, assignments.split(",")):
        key, _, value = item.partition("=")
        value = json.loads(value) if value[:1] in "0123456789[{-" or value in ("true", "false", "null") else value
        group, _, field = key.partition(".")
        if key == "late_baseline":
            late = bool(value)
        elif field:
            nested[group][field] = value
        else:
            settings = dataclasses.replace(settings, **{key: value})
    for group, fields in nested.items():
        if fields:
            settings = dataclasses.replace(settings, **{group: dataclasses.replace(getattr(settings, group), **fields)})
    return name, settings, late


def load_seeds(paths: list[str]) -> dict[str, str]:
    seeds = {}
    for path in paths:
        for problem in json.loads(Path(path).read_text())["problems"]:
            if isinstance(problem.get("seed"), str):
                seeds[Path(problem["path"]).stem] = problem["seed"]
    return seeds


def variants_of(task: str, task_source: str, seed: str, count: int, rng, result=None) -> list[tuple[str, str, str]]:
    """``count`` children of the seed from the tunable-constant operator; ``result``: the seed's
    evaluation, which the operator reads as a search's would (no child that spills more, say)."""
    mutate, out = TunableConstantMutation(), []
    parent = Program(id=0, task=task, island=0, generation=0, operator="seed", source=seed, result=result)
    for _ in range(count):
        try:
            out.append((task, task_source, mutate.propose(Context(task, task_source, parent), rng).source))
        except Exception as exc:  # a seed without tunable constants
            print(f"{task}: no variant ({type(exc).__name__}: {exc})")
            break
    return out


def changed_lines(parent: str, child: str) -> list[str]:
    """The child's lines that differ from its parent's (what the operator tuned), for the record."""
    return [line[1:].strip() for line in difflib.unified_diff(parent.splitlines(), child.splitlines(), lineterm="", n=0)
            if line.startswith("+") and not line.startswith("+++")]


def candidates(problems: list[Path], seeds: dict[str, str], variants: int) -> list[tuple[str, str, str]]:
    rng, per_problem = np.random.default_rng(0), []
    for path in problems:
        seed = seeds.get(path.stem)
        if seed is None and (path.parent / "seeds" / path.name).exists():
            seed = (path.parent / "seeds" / path.name).read_text()
        if seed is None:
            print(f"{path.stem}: no seed, left out")
            continue
        source = path.read_text()
        per_problem.append([(path.stem, source, seed), *variants_of(path.stem, source, seed, variants, rng)])
    longest = max(map(len, per_problem), default=0)
    return [own[i] for i in range(longest) for own in per_problem if i < len(own)]  # round robin


def run_mode(name: str, settings: EvaluatorSettings, work: list, record: dict, save, blocks: bool = False,
             late_baseline: bool = True, children: int = 0) -> None:
    """Score ``work`` in order with as many evaluations in flight as the evaluator's pipeline; with
    ``blocks``, one problem after another, each problem's block timed on its own (``record["blocks"]``).
    ``late_baseline``: as ``evo run``, results do not wait for their task's torch.compile baseline.
    ``children`` (with ``blocks``): each block scores its seed alone, then that many children
    proposed from the seed and its result (``variants_of``), as a search's first generation."""
    evaluator = Evaluator(settings, DEVICE, 0 if DEVICE == "cuda" else None)
    for worker in evaluator.workers:  # import torch before the clock starts, as a run's warm workers
        worker.start()
    evaluator.wait_warm()  # a run's warm start is over by its first evaluation (beside its task checks)
    pending, lock = [], threading.Lock()
    seed_speedups: dict[str, float] = {}  # the bar a task's variants race against (evaluator.race)
    seed_results: dict = {}
    rows = record.setdefault("evaluations", [])
    record["pipeline"] = evaluator.depth

    def drain() -> None:
        while True:
            with lock:
                if not pending:
                    return
                task, task_source, source = pending.pop()
                bar = seed_speedups.get(task)
            sent = time.monotonic()
            result = evaluator.evaluate(task, task_source, source, race_bar=bar, late_baseline=late_baseline)
            if bar is None:
                seed_results.setdefault(task, result)
                if result.speedup:
                    seed_speedups.setdefault(task, result.speedup)
            phases = result.extra.get("phases", {})
            with lock:
                rows.append({"task": task, "status": result.status.value, "reason": result.reason[:300],
                             "round_trip_s": time.monotonic() - sent, "timed_calls_s": phases.get("timed_calls_s"),
                             "speedup": result.speedup, "speedup_vs_compiled": result.speedup_vs_compiled,
                             "timed_window": result.extra.get("timed_window"), "phases": phases,
                             "timing_round": (result.extra.get("timing_round") or {}).get("round"),
                             "timed_batches": result.extra.get("timed_batches"),
                             "compile_baseline": result.extra.get("compile_baseline"),
                             "done_at": time.monotonic()})
                print(f"[{name}] {task}: {result.status.value} {rows[-1]['round_trip_s']:.1f} s "
                      f"(timed calls {phases.get('timed_calls_s') or 0:.2f} s) speedup {result.speedup}", flush=True)
                save()

    groups: dict[str, list] = {}
    for item in work:
        groups.setdefault(item[0] if blocks else "", []).append(item)
    sampler, began = UtilisationSampler(0, enabled=DEVICE == "cuda"), time.monotonic()
    for task, group in groups.items():
        started = time.monotonic()
        if children and blocks:
            pending[:] = [group[0]]
            drain()
            task, task_source, seed = group[0]
            group = variants_of(task, task_source, seed, children, np.random.default_rng(0), seed_results.get(task))
            record.setdefault("children", {})[task] = [changed_lines(seed, source) for _, _, source in group]
        pending[:] = list(reversed(group))
        threads = [threading.Thread(target=drain) for _ in range(evaluator.slots)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if blocks:
            done = sorted(r["done_at"] for r in rows if r["task"] == task and r["done_at"] >= started)
            record.setdefault("blocks", {})[task] = {
                "elapsed_s": time.monotonic() - started, "evaluations": len(done),
                # After the first result, one per this long: the pipeline full, the task's start paid.
                "steady_s": (done[-1] - done[0]) / (len(done) - 1) if len(done) > 1 else None}
    record["elapsed_s"] = time.monotonic() - began
    record["gpu_busy"] = sampler.stop()
    evaluator.close()
    save()


def summarise(record: dict) -> dict:
    per_task: dict[str, list] = {}
    for row in record["evaluations"]:
        per_task.setdefault(row["task"], []).append(row)
    summary = {}
    for task, rows in per_task.items():
        timed = [r for r in rows if r["timed_calls_s"]]
        wall = statistics.median(r["round_trip_s"] for r in rows)
        block = (record.get("blocks") or {}).get(task)
        steady = None
        if block:  # in a block of its own, pipeline included: what a search on this problem pays per child
            wall, steady = block["elapsed_s"] / block["evaluations"], block.get("steady_s")
        gpu = statistics.median(r["timed_calls_s"] for r in timed) if timed else None
        phases = {k: statistics.median(r["phases"].get(k, 0.0) for r in timed)
                  for k in sorted({k for r in timed for k in r["phases"]})} if timed else {}
        speedups = [r["speedup"] for r in rows if r["speedup"]]
        alone = statistics.median(r["phases"].get("timing_s", 0.0) for r in timed) if timed else None
        summary[task] = {"alone_s": alone, "short": sum(r.get("timing_round") == "short" for r in rows),
                         "evaluations": len(rows), "correct": sum(r["status"] == "correct" for r in rows),
                         "speedup": statistics.median(speedups) if speedups else None, "wall_s": wall,
                         "steady_s": steady, "timed_calls_s": gpu,
                         "target_s": None if gpu is None else 1.5 * gpu + 1.0,
                         "meets": None if gpu is None else wall <= 1.5 * gpu + 1.0, "phases": phases}
    count = len(record["evaluations"])
    record["summary"] = summary
    record["per_gpu_minute"] = 60 * count / record["elapsed_s"] if record.get("elapsed_s") else None
    # In a pipeline evaluations overlap: the elapsed time per evaluation is what the search pays.
    record["elapsed_per_evaluation_s"] = record["elapsed_s"] / count if count else None
    return summary


def markdown(modes: dict, meta: dict) -> str:
    lines = [f"# Throughput on {meta.get('device', '?')}", "", f"command: `{meta['command']}`", ""]
    for name, record in modes.items():
        if "summary" not in record:
            continue
        busy = record.get("gpu_busy")
        lines += [f"## mode {name}: {record['settings']}", "",
                  f"{len(record['evaluations'])} evaluations in {record['elapsed_s']:.0f} s: "
                  f"**{record['per_gpu_minute']:.2f} per GPU-minute** ({record['pipeline']} in flight, "
                  f"{record['elapsed_per_evaluation_s']:.2f} s each), GPU busy "
                  f"{'n/a' if busy is None else f'{100 * busy:.0f}%'} (nvidia-smi utilisation)", "",
                  "| problem | evals (timed in a short round) | correct | speedup (median) | "
                  + ("wall per eval (its block's elapsed / evals)" if record.get("blocks") else "wall per eval (median)")
                  + " | steady (after the first result) | of it timing (alone on the GPU, median) | timed calls' GPU time"
                  " | target 1.5 x + 1 s | meets (block / steady) | biggest phases |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for task, s in record["summary"].items():
            top = sorted(((v, k) for k, v in s["phases"].items() if k not in ("total_s", "timing_s", "checks_s")),
                         reverse=True)[:4]
            gpu = "-" if s["timed_calls_s"] is None else f"{s['timed_calls_s']:.2f} s"
            target = "-" if s["target_s"] is None else f"{s['target_s']:.2f} s"
            speedup = "-" if s["speedup"] is None else f"{s['speedup']:.3f}x"
            steady = s.get("steady_s")
            meets_steady = "" if steady is None or s["target_s"] is None else \
                " / " + ("yes" if steady <= s["target_s"] else "no")
            lines.append(f"| {task} | {s['evaluations']} ({s['short']}) | {s['correct']} | {speedup} | {s['wall_s']:.2f} s | "
                         f"{'-' if steady is None else format(steady, '.2f') + ' s'} | "
                         f"{'-' if s['alone_s'] is None else format(s['alone_s'], '.2f') + ' s'} | {gpu} | {target} | "
                         f"{'-' if s['meets'] is None else 'yes' if s['meets'] else 'no'}{meets_steady} | "
                         + ", ".join(f"{k} {v:.2f}" for v, k in top) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--seeds-from", nargs="*", default=[])
    parser.add_argument("--variants", type=int, default=2)
    parser.add_argument("--mode", action="append", default=[])
    parser.add_argument("--out", default="throughput")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--blocks", action="store_true",
                        help="one problem at a time (all its candidates), each block timed on its own")
    parser.add_argument("--children-of-result", action="store_true",
                        help="with --blocks: a block scores its seed first, then --variants children proposed "
                             "from the seed and its result, as a search's first generation (the operator "
                             "sees, say, that the seed spills registers)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.children_of_result and not args.blocks:
        parser.error("--children-of-result needs --blocks")
    children = args.variants if args.children_of_result else 0
    work = candidates([Path(p) for p in args.problems], load_seeds(args.seeds_from), 0 if children else args.variants)
    modes = {}
    meta = {"command": " ".join(["python3", *sys.argv]), "candidates": len(work)}
    try:
        import torch

        meta.update(device=torch.cuda.get_device_name(0), torch=torch.__version__)
    except Exception as exc:  # no GPU: the evaluator says so on the first evaluation
        meta["device"] = f"none ({type(exc).__name__})"

    def save() -> None:
        (out / "throughput.json").write_text(json.dumps({"meta": meta, "modes": modes}, indent=1, default=str))

    for text in args.mode or ["default:"]:
        name, settings, late = parse_mode(text)
        modes[name] = {"settings": text.partition(":")[2] or "defaults"}
        run_mode(name, settings, work, modes[name], save, blocks=args.blocks, late_baseline=late, children=children)
        summarise(modes[name])
        save()
        (out / "throughput.md").write_text(markdown(modes, meta))
    print(markdown(modes, meta))


if __name__ == "__main__":
    main()

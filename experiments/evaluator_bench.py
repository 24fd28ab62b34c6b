"""Evaluator benchmark on GPUs: throughput on one and two GPUs, host overhead,
repeatability across workers, agreement with do_bench, torch.compile and roofline.

    python experiments/evaluator_bench.py --variants 3 --out evaluator_bench.md

1. Repeatability: ``--repeats`` fresh workers, one after another, time every
   seed; the spread (max - min over the median) of the speedups they report.
   Done for the default timing loop (``batch`` pairs of calls queued between
   synchronisations) and for ``batch=1`` (synchronise around every pair), on
   different GPUs at the same time when there are two.
2. Throughput: one worker on GPU 0 scores every seed plus ``--variants``
   mutated variants of it (offline operator, fixed RNG); then two workers on
   GPUs 0 and 1 share the same list from one queue (fresh workers and caches
   each time).  Host overhead per evaluation: the request's round trip minus
   the time the evaluation process reports (fork, IPC, result).
3. torch.compile and roofline: a worker with the compile baseline on scores
   every seed once: speedup over eager and over torch.compile, roofline
   fraction, and the one-time cost of compiling the baseline.
4. Agreement: ``triton.testing.do_bench`` times every seed and its reference
   in a separate process; its speedup is compared with ours.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from evaluator import Evaluator, EvaluatorSettings
from evo.core.program import Program
from evo.core.task import load_tasks
from operators import Context, TunableConstantMutation

DO_BENCH = r'''
import importlib.util, json, sys, torch, triton
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m; spec.loader.exec_module(m); return m
task, seed = load(sys.argv[1], "task_mod"), load(sys.argv[2], "seed_mod")
shape = (getattr(task, "SHAPES", None) or [{}])[-1]
torch.manual_seed(0); inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in task.get_inputs(**shape)]
torch.manual_seed(0); ref = task.Model(*task.get_init_inputs()).cuda().eval()
torch.manual_seed(0); new = seed.ModelNew(*task.get_init_inputs()).cuda().eval()
with torch.no_grad():
    t_new = triton.testing.do_bench(lambda: new(*inputs), warmup=100, rep=500)
    t_ref = triton.testing.do_bench(lambda: ref(*inputs), warmup=100, rep=500)
print(json.dumps({"new_ms": t_new, "ref_ms": t_ref}))
'''


DEVICE, BACKEND = "cuda", "inductor"  # --device cpu: a smoke test of this script through Triton's interpreter


def make(settings: EvaluatorSettings, gpu: int) -> Evaluator:
    return Evaluator(settings, DEVICE, gpu if DEVICE == "cuda" else None)


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def repeatability(tasks, settings: EvaluatorSettings, gpu: int, repeats: int, out: dict) -> None:
    for _ in range(repeats):
        ev = make(settings, gpu)
        for task in tasks:
            r = ev.evaluate(task.name, task.source, task.seeds[0])
            out.setdefault(task.name, []).append((r.speedup, r.speedup_noise))
        ev.close()


def throughput(candidates, settings: EvaluatorSettings, gpus: list[int]) -> dict:
    work: queue.Queue = queue.Queue()
    for item in candidates:
        work.put(item)
    records, names, lock = [], [], threading.Lock()
    evaluators = [make(settings, g) for g in gpus]
    for ev in evaluators:  # start the workers (import torch) before the clock starts
        ev.worker.start()

    def drain(ev: Evaluator) -> None:
        while True:
            try:
                task, source = work.get_nowait()
            except queue.Empty:
                return
            sent = time.monotonic()
            r = ev.evaluate(task.name, task.source, source)
            with lock:
                records.append((time.monotonic() - sent, r))
                names.append(task.name)

    start = time.monotonic()
    threads = [threading.Thread(target=drain, args=(ev,)) for ev in evaluators]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    for ev in evaluators:
        ev.close()
    overheads = [round_trip - r.wall_s for round_trip, r in records]
    phases = [r.extra.get("phases", {}) for _, r in records if r.correct]
    return {"records": list(zip(names, (r for _, r in records))), "elapsed": elapsed, "count": len(records), "correct": sum(r.correct for _, r in records),
            "per_min": 60 * len(records) / elapsed, "overhead_ms": 1e3 * statistics.median(overheads),
            "overhead_frac": sum(overheads) / sum(rt for rt, _ in records),
            "timing_frac": sum(p.get("timing_s", 0) for p in phases) / sum(rt for rt, _ in records),
            "device": records[-1][1].device}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--out", default=None)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--parts", default="repeat,throughput,compile,agree",
                        help="comma-separated subset of repeat, throughput, compile, live, agree")
    args = parser.parse_args()
    global DEVICE, BACKEND
    DEVICE, BACKEND = args.device, "inductor" if args.device == "cuda" else "aot_eager"
    tasks = load_tasks("default", names=None if DEVICE == "cuda" else ["gelu", "row_sum"])
    base = EvaluatorSettings(device=DEVICE, timeout_s=300, compile_baseline=False)
    synced = dataclasses.replace(base, timing=dataclasses.replace(base.timing, batch=1))
    two = args.gpus >= 2

    parts = set(args.parts.split(","))
    rep_batched, rep_synced = {}, {}
    jobs = [] if "repeat" not in parts else [threading.Thread(target=repeatability, args=(tasks, base, 0, args.repeats, rep_batched)),
            threading.Thread(target=repeatability, args=(tasks, synced, 1 if two else 0, args.repeats, rep_synced))]
    for job in jobs:
        job.start()
        if not two:
            job.join()
    for job in jobs:
        job.join()

    rng, mutate = np.random.default_rng(0), TunableConstantMutation()
    per_task = []
    for task in tasks:
        parent = Program(id=0, task=task.name, island=0, generation=0, operator="seed", source=task.seeds[0])
        per_task.append([(task, task.seeds[0])] + [
            (task, mutate.propose(Context(task.name, task.source, parent), rng).source)
            for _ in range(args.variants)])
    candidates = [c for round_ in zip(*per_task) for c in round_]  # round robin over the tasks

    compiled: dict = {}

    def compile_baseline() -> None:
        ev = make(dataclasses.replace(base, compile_baseline=True, compile_backend=BACKEND), 1 if two else 0)
        for task in tasks:
            t0 = time.monotonic()
            r = ev.evaluate(task.name, task.source, task.seeds[0])
            compiled[task.name] = (r, time.monotonic() - t0)
        ev.close()

    live_settings = dataclasses.replace(base, compile_baseline=True, compile_backend=BACKEND, compile_timing="live")
    live: dict = {}
    side = threading.Thread(target=compile_baseline)
    live_side = threading.Thread(target=lambda: live.update(throughput(candidates, live_settings, [1 if two else 0])))
    if two and "compile" in parts:
        side.start()  # on GPU 1 while GPU 0 measures one-worker throughput
    elif two and "live" in parts:
        live_side.start()  # the same list on GPU 1, compiling and timing torch.compile live for every candidate
    one = throughput(candidates, base, [0]) if "throughput" in parts else None
    if two and "compile" in parts:
        side.join()
    elif "compile" in parts:
        compile_baseline()
    if two and "live" in parts and "compile" not in parts:
        live_side.join()
    elif "live" in parts:
        live_side.run()
    both = throughput(candidates, base, [0, 1]) if two and "throughput" in parts else None

    agree = {}
    for task in tasks if DEVICE == "cuda" and "agree" in parts else []:
        seed_path = Path(task.path).parent / "seeds" / Path(task.path).name
        out = subprocess.run([sys.executable, "-c", DO_BENCH, task.path, str(seed_path)], capture_output=True,
                             text=True, timeout=600)
        timing = json.loads(out.stdout.strip().splitlines()[-1])
        agree[task.name] = timing["ref_ms"] / timing["new_ms"]

    report(args, tasks, one, both, rep_batched, rep_synced, compiled, agree, live)


def live_lines(one: dict | None, live: dict) -> list[str]:
    """The cost of timing torch.compile live, and what it reports for each task's seed."""
    lines = ["", "## torch.compile timed live, interleaved with every candidate", "",
             f"{live['count']} evaluations ({live['correct']} correct) in {live['elapsed']:.0f} s: "
             f"{live['per_min']:.1f} evaluations/min"]
    if one:
        lines[-1] += f" against {one['per_min']:.1f} without the baseline ({live['per_min'] / one['per_min']:.0%})"
    lines += ["", "| task | speedup over eager | over torch.compile (live) | compiled ms | baseline error |",
              "| --- | ---: | ---: | ---: | --- |"]
    first: dict = {}
    for name, r in live["records"]:  # each task's first candidate is its seed
        first.setdefault(name, r)
    for name, r in first.items():
        lines.append(f"| {name} | {r.speedup or 0:.3f}x | {r.speedup_vs_compiled or 0:.3f}x | "
                     f"{r.compiled_runtime_ms or 0:.4f} | {r.extra.get('compile_baseline_error', '')[:60]} |")
    return lines


def report(args, tasks, one, both, rep_batched, rep_synced, compiled, agree, live=None) -> None:
    lines = [f"Device: {args.device} x {args.gpus}, parts: {args.parts}", "",
             "## Throughput", "",
             "| workers | evaluations (correct) | wall | evaluations/min | per GPU | host overhead per evaluation "
             "| overhead share of wall | timing share of wall |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for n, t in ((1, one), (2, both)):
        if t:
            lines.append(f"| {n} | {t['count']} ({t['correct']}) | {t['elapsed']:.0f} s | {t['per_min']:.1f} | "
                         f"{t['per_min'] / n:.1f} | {t['overhead_ms']:.0f} ms | {t['overhead_frac']:.1%} | "
                         f"{t['timing_frac']:.1%} |")
    if one and both:
        lines += ["", f"Two GPUs over one: **{both['per_min'] / one['per_min']:.2f}x** (target: at least 1.9x)"]
    lines += ["", "## Repeatability, agreement, torch.compile, roofline", "",
              f"Speedup of each seed from {args.repeats} fresh workers; spread = (max - min) / median.", "",
              "| task | speedups, batched loop | spread | noise reported | speedups, synchronised loop | spread "
              "| do_bench | first vs do_bench | vs torch.compile | roofline fraction | compile baseline cost |",
              "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    spreads_b, spreads_s, agreements = [], [], []
    for task in tasks if rep_batched else []:
        b = [s for s, _ in rep_batched[task.name] if s]
        s = [s for s, _ in rep_synced[task.name] if s]
        noise = statistics.median(n for _, n in rep_batched[task.name] if n is not None)
        spreads_b.append(spread(b))
        spreads_s.append(spread(s))
        agreements.append(abs(b[0] - agree[task.name]) / agree[task.name] if task.name in agree else 0.0)
        r, cost = compiled.get(task.name, (None, 0.0))
        if r is None:
            lines.append(f"| {task.name} | {', '.join(f'{v:.3f}' for v in b)} | {spread(b):.1%} | {noise:.1%} | "
                         f"{', '.join(f'{v:.3f}' for v in s)} | {spread(s):.1%} | - | - | - | - | - |")
            continue
        vs_compiled = f"{r.speedup_vs_compiled:.3f}x" if r.speedup_vs_compiled else r.extra.get(
            "compile_baseline_error", "-")[:40]
        roof = f"{r.roofline_fraction:.1%}" if r.roofline_fraction is not None else "-"
        lines.append(f"| {task.name} | {', '.join(f'{v:.3f}' for v in b)} | {spread(b):.1%} | {noise:.1%} | "
                     f"{', '.join(f'{v:.3f}' for v in s)} | {spread(s):.1%} | {agree.get(task.name, 0):.3f}x | "
                     f"{agreements[-1]:.1%} | {vs_compiled} | {roof} | {cost:.0f} s |")
    peaks = next((r.extra.get("roofline") for r, _ in compiled.values() if r.extra.get("roofline")), None)
    lines += [""] if not spreads_b else ["",
              f"Repeatability, batched loop (default): median spread {statistics.median(spreads_b):.1%}, "
              f"max {max(spreads_b):.1%} (target: within 1%)",
              f"Repeatability, synchronised loop: median spread {statistics.median(spreads_s):.1%}, "
              f"max {max(spreads_s):.1%}",
              f"Agreement with do_bench: median {statistics.median(agreements):.1%}, max {max(agreements):.1%}"]
    if peaks:
        lines.append(f"Measured peaks: {peaks['bytes_per_s'] / 1e12:.2f} TB/s copy bandwidth, "
                     f"{peaks['flops_per_s'] / 1e12:.0f} TFLOP/s fp16 matmul ({peaks['source']})")
    if live:
        lines += live_lines(one, live)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()

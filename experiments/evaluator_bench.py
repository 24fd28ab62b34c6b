"""Evaluator benchmark on a GPU: throughput, repeatability, agreement with do_bench.

    python experiments/evaluator_bench.py --variants 2 --out evaluator_bench.md

1. Throughput: one evaluator worker scores every built-in seed and ``--variants``
   mutated variants of it (the offline operator, fixed RNG): evaluations per minute.
2. Repeatability: two further, separate workers each time every seed; the
   speedups they report are compared (relative difference of the two medians).
3. Agreement: for every seed, ``triton.testing.do_bench`` times the seed and the
   reference on the same (largest) shape in a separate process; its speedup is
   compared with the first worker's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from evaluator import Evaluator, EvaluatorSettings
from evo.program import Program
from evo.task import load_tasks
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    tasks = load_tasks("default")
    settings = EvaluatorSettings(device="cuda", timeout_s=300)
    rng = np.random.default_rng(0)
    mutate = TunableConstantMutation()

    first = Evaluator(settings, "cuda", 0)
    first_speedups, walls, statuses = {}, [], []
    start = time.monotonic()
    for task in tasks:
        parent = Program(id=0, task=task.name, island=0, generation=0, operator="seed", source=task.seeds[0])
        sources = [task.seeds[0]] + [mutate.propose(Context(task.name, task.source, parent), rng).source
                                     for _ in range(args.variants)]
        for i, source in enumerate(sources):
            r = first.evaluate(task.name, task.source, source)
            walls.append(r.wall_s)
            statuses.append(r.status.value)
            if i == 0:
                first_speedups[task.name] = r.speedup
    elapsed = time.monotonic() - start
    device = r.device
    first.close()

    repeat = {}
    for label in ("A", "B"):
        ev = Evaluator(settings, "cuda", 0)
        for task in tasks:
            repeat.setdefault(task.name, {})[label] = ev.evaluate(task.name, task.source, task.seeds[0]).speedup
        ev.close()

    agree = {}
    for task in tasks:
        seed_path = Path(task.path).parent / "seeds" / Path(task.path).name
        out = subprocess.run([sys.executable, "-c", DO_BENCH, task.path, str(seed_path)], capture_output=True,
                             text=True, timeout=600)
        timing = json.loads(out.stdout.strip().splitlines()[-1])
        agree[task.name] = timing["ref_ms"] / timing["new_ms"]

    lines = [f"Device: {device}", "",
             f"Throughput: {len(walls)} evaluations ({statuses.count('correct')} correct) in {elapsed:.0f} s = "
             f"**{60 * len(walls) / elapsed:.1f} evaluations/min** on one GPU (median {statistics.median(walls):.2f} s "
             "per evaluation, including compilation of new variants)", "",
             "| task | speedup, worker A | worker B | A vs B | speedup, first worker | do_bench | first vs do_bench |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    rel = lambda a, b: abs(a - b) / ((a + b) / 2)  # noqa: E731
    diffs, agreements = [], []
    for task in tasks:
        a, b = repeat[task.name]["A"], repeat[task.name]["B"]
        f, d = first_speedups[task.name], agree[task.name]
        diffs.append(rel(a, b))
        agreements.append(rel(f, d))
        lines.append(f"| {task.name} | {a:.3f}x | {b:.3f}x | {rel(a, b):.1%} | {f:.3f}x | {d:.3f}x | {rel(f, d):.1%} |")
    lines += ["", f"Repeatability (two workers, same seed): median {statistics.median(diffs):.1%}, "
              f"max {max(diffs):.1%} (target: within 1%)",
              f"Agreement with do_bench: median {statistics.median(agreements):.1%}, max {max(agreements):.1%}"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()

"""Issue 33's record: the offline search (no LLM) on KernelBench problems against torch.compile.

    # 1. draw the problems (here, from a KernelBench checkout): 16 per level, seeded
    python3 experiments/kernelbench_search.py draw --kernelbench KernelBench/KernelBench --out TASKS
    # 2. the search, once per tolerance (defaults otherwise; experiment=multi_gpu on a node of GPUs)
    python3 -m evo.cli run task.path=TASKS run.budget.evaluations=640 run.dir=RUN_STRICT
    python3 -m evo.cli run task.path=TASKS run.budget.evaluations=640 run.dir=RUN_KB evaluator.tolerance=kernelbench
    # 3. eager, torch.compile and torch.compile(mode="max-autotune-no-cudagraphs") of every problem
    python3 experiments/kernelbench_search.py baselines --tasks TASKS --out baselines.json [--gpus 4] [--tolerance kernelbench]
    # 4. the tables
    python3 experiments/kernelbench_search.py collect --run strict=RUN_STRICT --run kernelbench=RUN_KB \\
        [--baselines baselines.json] --out DIR

``draw``: ``--per-level`` problems from each of ``level1`` and ``level2``, drawn with
``random.Random(--seed)`` from every file of the level (no filter), copied unchanged as
``l<level>_<file>``.

``baselines``: one process per problem (``--gpus`` of them at once, one GPU each): the reference's
eager forward, ``torch.compile`` (defaults) and ``torch.compile(mode=--max-autotune-mode)`` of separate
copies of the model (by default ``max-autotune-no-cudagraphs``: inductor's tuning of its kernels;
``max-autotune`` adds CUDA graphs, which copy every call's inputs into the graph's own buffers), timed interleaved call by call with the engine's own timer (L2 flushed before
each call, medians), fp32 products in fp32 as the evaluator runs them.  A problem past
``--timeout`` seconds is recorded as such.

``collect``: from each run's archive, per problem: eager and torch.compile time (the engine's, for
the shapes it timed), the seed's time, the best correct kernel's time and its speedups, the
children evaluated, the roofline floor and bound; then geomeans over eager and over torch.compile
(problems without a correct kernel left out, and counted), fast_1 over torch.compile, and the
median fraction of the memory floor reached by the best kernels of memory-bound problems; the
same per family (convolutions, GEMMs and the others, told by KernelBench's file names).
Writes ``kernelbench_search.json`` and ``kernelbench_search.md`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LEVELS = ("level1", "level2")


def _number(name: str) -> int:
    return int(name.split("_", 1)[0])


def draw(args) -> None:
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    drawn = {}
    for level in LEVELS:
        files = sorted((p.name for p in Path(args.kernelbench, level).glob("*.py")), key=_number)
        drawn[level] = sorted(rng.sample(files, args.per_level), key=_number)
        for name in drawn[level]:
            shutil.copyfile(Path(args.kernelbench, level, name), out / f"l{level[-1]}_{name}")
    print(json.dumps(drawn, indent=1))


# --- baselines -------------------------------------------------------------------------------

def _measure_one(path: str, reps: int, budget_s: float, max_autotune_mode: str, tolerance: str) -> dict:
    """Runs in its own process, on the one GPU it sees (trusted code: KernelBench's references);
    in the precision the engine times that tolerance's baselines in (``evaluator.fp32_precision.precision_for``)."""
    import copy
    import importlib.util

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from evaluator.settings import TOLERANCES
    from evaluator.fp32_precision import precision_for
    from evaluator.timing import time_interleaved

    precision_for(TOLERANCES[tolerance])
    spec = importlib.util.spec_from_file_location("problem", path)
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs()).cuda().eval()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    row = {}
    with torch.no_grad():
        compiled = {}
        for label, mode in (("compile", None), ("max_autotune", max_autotune_mode)):
            began = time.perf_counter()
            fn = torch.compile(copy.deepcopy(model), mode=mode)
            fn(*inputs)
            torch.cuda.synchronize()
            row[f"{label}_compile_s"] = round(time.perf_counter() - began, 1)
            compiled[label] = (lambda f: lambda: f(*inputs))(fn)
        timed = time_interleaved(lambda: model(*inputs), compiled, "cuda", warmup=3, reps=reps,
                                 budget_s=budget_s, warmup_s=0.2)
    row["eager_ms"] = timed["compile"].candidate.median_ms
    for label, side in timed.items():
        row[f"{label}_ms"] = side.baseline.median_ms
        row[f"{label}_spread"] = side.baseline.spread
    row["samples"] = timed["compile"].candidate.samples
    row["max_autotune_mode"] = max_autotune_mode
    row["precision"] = "strict fp32" if TOLERANCES[tolerance] is None else "PyTorch's defaults (cuDNN TF32)"
    return row


def baselines(args) -> None:
    tasks = sorted(Path(args.tasks).glob("*.py"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = json.loads(out.read_text()) if out.exists() else {}
    todo = [p for p in tasks if "eager_ms" not in results.get(p.stem, {})]
    gpus = list(range(args.gpus))
    free = list(gpus)

    def run(path: Path) -> tuple[str, dict]:
        gpu = free.pop()
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu))
        began = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, __file__, "_one", str(path), str(args.reps), str(args.budget_s),
                                   args.max_autotune_mode, args.tolerance],
                                  env=env, capture_output=True, text=True, timeout=args.timeout)
            lines = proc.stdout.strip().splitlines()
            row = json.loads(lines[-1]) if proc.returncode == 0 and lines else {
                "error": (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1][:300]}
        except subprocess.TimeoutExpired:
            row = {"error": f"timed out after {args.timeout} s"}
        finally:
            free.append(gpu)
        row["wall_s"] = round(time.perf_counter() - began, 1)
        return path.stem, row

    with ThreadPoolExecutor(len(gpus)) as pool:
        for name, row in pool.map(run, todo):
            results[name] = row
            out.write_text(json.dumps(results, indent=1))
            print(name, json.dumps(row), flush=True)


# --- collect ---------------------------------------------------------------------------------

_BEST = """
SELECT p.task, p.operator, p.generation, e.runtime_ms, e.ref_runtime_ms, e.compiled_runtime_ms, e.speedup,
       e.speedup_vs_compiled, e.floor_ms, e.roofline_bound, e.device
FROM programs p JOIN evaluations e ON e.program_id = p.id
WHERE e.status = 'correct' AND e.runtime_ms IS NOT NULL
"""


def _run_rows(run_dir: Path) -> dict[str, dict]:
    db = sqlite3.connect(f"file:{run_dir / 'archive.db'}?mode=ro", uri=True)
    per_task: dict[str, dict] = {}
    for task, operator, generation, ms, eager, compiled, speedup, vs_compiled, floor, bound, device in db.execute(_BEST):
        row = per_task.setdefault(task, {"device": device})
        entry = {"ms": ms, "eager_ms": eager, "compile_ms": compiled, "speedup": speedup,
                 "vs_compile": vs_compiled, "floor_ms": floor, "bound": bound, "operator": operator}
        if generation == 0 and ("seed" not in row or ms < row["seed"]["ms"]):
            row["seed"] = entry
        if "best" not in row or speedup > row["best"]["speedup"]:
            row["best"] = entry
        if compiled and eager:
            row.setdefault("compile_ratios", []).append(compiled / eager)
    for task, children, correct in db.execute(
            "SELECT p.task, COUNT(*), SUM(e.status = 'correct') FROM programs p JOIN evaluations e "
            "ON e.program_id = p.id WHERE p.generation > 0 GROUP BY p.task"):
        per_task.setdefault(task, {}).update(children=children, children_correct=correct)
    for task, stage, reason in db.execute("SELECT task, stage, reason FROM set_aside"):
        per_task.setdefault(task, {}).update(set_aside=f"{stage}: {reason[:200]}")
    return per_task


_MARK = {"run": "*", "standalone": "†"}


def _fill_compile(rows: dict[str, dict], base: dict[str, dict]) -> None:
    """A kernel's torch.compile time where its archive row has none (a result recorded before its
    task's baseline, in a session that ended before the baseline came): its eager time times a
    compile-over-eager ratio, as the engine's own cached baseline does
    (``evaluator.compile_timing=cached``): the median of the task's other rows in the run
    (``compile_from: run``), else that of the standalone baselines (``standalone``)."""
    for task, row in rows.items():
        b = base.get(task, {})
        ratios = row.pop("compile_ratios", [])
        if ratios:
            ratio, source = statistics.median(ratios), "run"
        elif b.get("compile_ms") and b.get("eager_ms"):
            ratio, source = b["compile_ms"] / b["eager_ms"], "standalone"
        else:
            continue
        for key in ("seed", "best"):
            entry = row.get(key)
            if entry and not entry.get("compile_ms") and entry.get("eager_ms"):
                entry["compile_ms"] = entry["eager_ms"] * ratio
                entry["vs_compile"] = entry["compile_ms"] / entry["ms"]
                entry["compile_from"] = source


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def family(task: str) -> str:
    """``convolution``, ``gemm`` (a matrix product and its epilogue) or ``other`` (elementwise,
    reductions, pooling), from KernelBench's file names."""
    name = task.lower()
    if "conv" in name:
        return "convolution"
    return "gemm" if "gemm" in name or "matmul" in name else "other"


def _max_autotune_ms(best: dict | None, base: dict) -> float | None:
    """max-autotune-no-cudagraphs' time for a kernel's problem: the baselines' max-autotune over
    compile (the two timed side by side in a process of their own), times this run's compile time."""
    if not (best and best.get("compile_ms") and base.get("max_autotune_ms") and base.get("compile_ms")):
        return None
    return best["compile_ms"] * base["max_autotune_ms"] / base["compile_ms"]


def summarize(rows: dict[str, dict], tasks: list[str], base: dict[str, dict] | None = None) -> dict:
    out = _summary(rows, tasks)
    best = {t: rows[t]["best"] for t in tasks if rows.get(t, {}).get("best")}
    over = [ma / best[t]["ms"] for t in best if (ma := _max_autotune_ms(best[t], (base or {}).get(t, {})))]
    out["geomean_vs_max_autotune"], out["max_autotune_problems"] = _geomean(over), len(over)
    out["families"] = {name: _summary(rows, [t for t in tasks if family(t) == name])
                       for name in ("other", "gemm", "convolution") if any(family(t) == name for t in tasks)}
    return out


def _summary(rows: dict[str, dict], tasks: list[str]) -> dict:
    best = [rows.get(t, {}).get("best") for t in tasks]
    solved = [b for b in best if b]
    memory = [b["floor_ms"] / b["ms"] for b in solved if b.get("bound") == "memory" and b.get("floor_ms")]
    # A problem without a correct kernel falls back to PyTorch's eager forward: 1.0x over eager.
    fallback_compile = [b["vs_compile"] if b else None for b in best]
    return {
        "problems": len(tasks), "with_correct_kernel": len(solved),
        "geomean_vs_eager": _geomean([b["speedup"] for b in solved]),
        "geomean_vs_compile": _geomean([b["vs_compile"] for b in solved]),
        "seed_geomean_vs_compile": _geomean([rows[t]["seed"]["vs_compile"] for t in tasks
                                             if rows.get(t, {}).get("seed")]),
        "fast_1_vs_compile": sum(1 for v in fallback_compile if v and v > 1.0) / len(tasks) if tasks else None,
        "fast_1_vs_eager": sum(1 for b in best if b and b["speedup"] > 1.0) / len(tasks) if tasks else None,
        "memory_bound": len(memory),
        "memory_floor_fraction_median": statistics.median(memory) if memory else None,
    }


def _f(value, digits=3, suffix="") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _percent(fraction) -> str:
    return _f(None if fraction is None else 100 * fraction, 1)


def _merged_rows(paths: str) -> dict[str, dict]:
    """The rows of ``DIR1+DIR2+...``, a task's row taken from the last run that searched it: a
    record whose later run searched again some of an earlier run's problems."""
    rows: dict[str, dict] = {}
    for path in paths.split("+"):
        for task, row in _run_rows(Path(path)).items():
            rows[task] = {**row, "run": path}
    return rows


def collect(args) -> None:
    runs = dict(spec.split("=", 1) for spec in args.run)
    data = {label: _merged_rows(paths) for label, paths in runs.items()}
    base = json.loads(Path(args.baselines).read_text()) if args.baselines else {}
    for rows in data.values():
        _fill_compile(rows, base)
    tasks = sorted({t for rows in data.values() for t in rows} | set(base),
                   key=lambda t: (t[:2], _number(t[3:]) if t[3:4].isdigit() else 0))
    summary = {label: summarize(rows, tasks, base) for label, rows in data.items()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernelbench_search.json").write_text(json.dumps(
        {"runs": runs, "summary": summary, "problems": data, "baselines": base}, indent=1))
    lines = []
    for label, rows in data.items():
        s = summary[label]
        lines += [f"### {label}", "",
                  f"{s['with_correct_kernel']} of {s['problems']} problems with a correct kernel; geomean of the "
                  f"best over eager **{_f(s['geomean_vs_eager'])}x**, over torch.compile "
                  f"**{_f(s['geomean_vs_compile'])}x** (seeds {_f(s['seed_geomean_vs_compile'])}x); fast_1 over "
                  f"torch.compile {_f(s['fast_1_vs_compile'], 2)}, over eager {_f(s['fast_1_vs_eager'], 2)}; "
                  f"memory-bound best kernels ({s['memory_bound']}): median "
                  f"{_percent(s['memory_floor_fraction_median'])}% of the memory floor; over "
                  f"max-autotune-no-cudagraphs {_f(s['geomean_vs_max_autotune'])}x "
                  f"({s['max_autotune_problems']} problems)", "",
                  *[f"- {name} ({f['problems']}): best over torch.compile {_f(f['geomean_vs_compile'])}x, seeds "
                    f"{_f(f['seed_geomean_vs_compile'])}x; memory-bound ({f['memory_bound']}) median "
                    f"{_percent(f['memory_floor_fraction_median'])}% of the floor"
                    for name, f in s["families"].items()], "",
                  "| problem | eager ms | compile ms | max-autotune ms | seed ms | best ms | best / eager | "
                  "best / compile | children (correct) | bound, floor ms | best's operator |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
        for task in tasks:
            row, b = rows.get(task, {}), base.get(task, {})
            best, seed = row.get("best"), row.get("seed")
            ma = _max_autotune_ms(best, b)
            lines.append(
                f"| {task} | {_f(best and best['eager_ms'])} | {_f(best and best['compile_ms'])}"
                f"{_MARK.get((best or {}).get('compile_from'), '')} | {_f(ma)} | "
                f"{_f(seed and seed['ms'])} | {_f(best and best['ms'])} | {_f(best and best['speedup'])} | "
                f"{_f(best and best['vs_compile'])} | {row.get('children', 0)} ({row.get('children_correct', 0)}) | "
                f"{(best or {}).get('bound') or '-'}, {_f(best and best['floor_ms'])} | "
                f"{(best or {}).get('operator') or row.get('set_aside', '-')} |")
        if any(r.get("best", {}).get("compile_from") for r in rows.values()):
            lines.append("\nThe run's archive has no torch.compile time for the kernels marked (their results "
                         "came before their task's baseline, in a session that ended first): their eager time "
                         "times the task's compile-over-eager ratio, \\* the median of the run's other results "
                         "of the task, † that of the standalone baselines (`--baselines`).")
        lines.append("")
    (out / "kernelbench_search.md").write_text("\n".join(lines))
    print("\n".join(lines))


def seeds(args) -> None:
    """The seeds a run derived, as ``seeds/NAME.py`` beside the problems a later run takes."""
    db = sqlite3.connect(f"file:{Path(args.run) / 'archive.db'}?mode=ro", uri=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for task, source in db.execute("SELECT task, source FROM programs WHERE generation = 0 AND operator = 'seed' "
                                   "ORDER BY id"):
        if not (out / f"{task}.py").exists():
            (out / f"{task}.py").write_text(source)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_one":
        print(json.dumps(_measure_one(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("draw")
    p.add_argument("--kernelbench", required=True, help="the folder holding level1/ and level2/")
    p.add_argument("--out", required=True)
    p.add_argument("--per-level", type=int, default=16)
    p.add_argument("--seed", type=int, default=33)
    p = sub.add_parser("baselines")
    p.add_argument("--tasks", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--budget-s", type=float, default=2.0)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--max-autotune-mode", default="max-autotune-no-cudagraphs")
    p.add_argument("--tolerance", default="strict", choices=["strict", "kernelbench"],
                   help="the search's evaluator.tolerance: the precision its baselines are timed in")
    p = sub.add_parser("collect")
    p.add_argument("--run", action="append", required=True,
                   help="LABEL=RUN_DIR, or LABEL=DIR1+DIR2 (a task's row from the last run that searched it)")
    p.add_argument("--baselines")
    p.add_argument("--out", required=True)
    p = sub.add_parser("seeds")
    p.add_argument("--run", required=True)
    p.add_argument("--out", required=True)
    args = parser.parse_args()
    {"draw": draw, "baselines": baselines, "collect": collect, "seeds": seeds}[args.command](args)


if __name__ == "__main__":
    main()

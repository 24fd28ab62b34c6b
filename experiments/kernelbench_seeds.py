"""Seeds from torch.compile for whole folders of KernelBench problem files, derived and evaluated.

    python3 experiments/kernelbench_seeds.py ../.kb/level1 ../.kb/level2 --out $OUT/kb \\
        [--workers 16] [--check-workers 4] [--derive-only] [--seeds-from A.json B.json] [--only REGEX]

1. Derive: ``--workers`` sandbox workers check the references and derive the seeds side by
   side on the GPU (``Evaluator.prepare_stream``, as ``evo run`` starts), each result written as
   it comes (``derive.seconds``: from the derivation's start until then).  ``--seeds-from`` takes the seeds of earlier runs' JSON instead (a later file's
   derivation of a problem replaces an earlier one's), with their checks and evaluations:
   what was checked or timed already is not done again.
2. Check (``--check-workers K`` > 0): every seed is checked for correctness by K evaluators
   at once, as many as the estimated footprints (six times the inputs' and weights' bytes,
   from the meta device) fit ``--budget-gb``, without the torch.compile baseline and with one
   timing repetition (these timings are not reported: the GPU is shared).
3. Time: one evaluator evaluates every seed that passed the check (or every seed, without a
   check), each kernel a run starts the task from (a twin in split precision, a split-K one: the
   record keeps the fastest correct), ``--time-workers`` at once (``evaluator.pipeline``: they load, compile and check side by
   side, and each is timed alone on the GPU), with the engine's procedure: staged checks, then timing
   interleaved with the eager reference, the torch.compile baseline measured once per task, here with
   ``--reps`` repetitions and ``--budget-s`` seconds at most per timing (the engine's
   default is 100 and 2.0).  ``--deadline`` stops starting evaluations after so many
   seconds from the start; the rest are listed as not timed.

Writes ``kernelbench_seeds.json`` (after every problem) and ``kernelbench_seeds.md`` under
``--out``; with ``--captures``, ``captures/`` (``captures.tar.gz`` once the derivation ends)
holds inductor's output, the graph inputs and the seed of every problem.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from evaluator import DerivedSeed, Evaluator, EvaluatorSettings, Preparation
from evaluator.evaluator import TimingSettings
from evo.loop.startup import starting_kernels

sys.path.insert(0, str(Path(__file__).parent))
from kernelbench_seeds_report import markdown  # noqa: E402


@dataclass(frozen=True)
class Job:
    name: str
    source: str
    footprint_gb: float


class MemoryAdmission:
    """Hands out jobs, largest first, while the footprints of those running fit the budget
    (a job alone always starts)."""

    def __init__(self, jobs: list[Job], budget_gb: float):
        self.pending = sorted(jobs, key=lambda j: -j.footprint_gb)
        self.budget_gb, self.used_gb, self.running = budget_gb, 0.0, 0
        self.cond = threading.Condition()

    def take(self) -> Job | None:
        with self.cond:
            while self.pending:
                room = self.budget_gb - self.used_gb
                job = next((j for j in self.pending if j.footprint_gb <= room or self.running == 0), None)
                if job is not None:
                    self.pending.remove(job)
                    self.used_gb += job.footprint_gb
                    self.running += 1
                    return job
                self.cond.wait()
            return None

    def done(self, job: Job) -> None:
        with self.cond:
            self.used_gb -= job.footprint_gb
            self.running -= 1
            self.cond.notify_all()


_EVAL_FIELDS = ("status", "reason", "speedup", "speedup_vs_compiled", "runtime_ms", "ref_runtime_ms",
                "compiled_runtime_ms", "wall_s", "device")


def footprint_gb(path: Path) -> float:
    """Six times the bytes of a problem's inputs and weights (meta tensors: nothing allocated),
    about what an evaluation holds on the GPU; 0 where that cannot be told."""
    import torch

    try:
        spec = importlib.util.spec_from_file_location(f"kb_{abs(hash(path))}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with torch.device("meta"):
            inputs = module.get_inputs()
            model = module.Model(*module.get_init_inputs())
        size = sum(t.numel() * t.element_size() for t in [*inputs, *model.parameters(), *model.buffers()]
                   if isinstance(t, torch.Tensor))
        return 6 * size / 1e9
    except Exception:  # the evaluation will say what is wrong with it
        return 0.0


def problems(folders: list[str], only: str | None) -> list[dict]:
    found = []
    for folder in folders:
        for path in sorted(Path(folder).glob("*.py"), key=lambda p: (len(p.stem.split("_")[0]), p.stem)):
            name = f"{Path(folder).name}/{path.stem}"
            if only and not re.search(only, name):
                continue
            found.append({"name": name, "level": Path(folder).name, "path": str(path),
                          "source": path.read_text(), "footprint_gb": round(footprint_gb(path), 2)})
    return found


class Results:
    """Per-problem records, written to JSON after every change."""

    def __init__(self, out: Path, rows: list[dict], meta: dict):
        self.out, self.rows, self.meta, self.lock = out, {r["name"]: r for r in rows}, meta, threading.RLock()

    def update(self, name: str, **fields) -> None:
        with self.lock:
            self.rows[name].update(fields)
            self.save()

    def save(self) -> None:
        with self.lock:
            data = {"meta": self.meta, "problems": [{k: v for k, v in r.items() if k != "source"}
                                                    for r in self.rows.values()]}
            (self.out / "kernelbench_seeds.json").write_text(json.dumps(data, indent=1))


def _eval_record(result) -> dict:
    record = {k: getattr(result, k) for k in _EVAL_FIELDS}
    record["status"] = result.status.value
    record["reason"] = (result.reason or "")[:400]
    for key in ("memory", "compile_baseline_error", "phases", "timed_checks"):
        if key in result.extra:
            record[key] = result.extra[key]
    return record


def in_threads(count: int, target, *args) -> None:
    """``target(*args)`` in ``count`` threads at once, until all return."""
    threads = [threading.Thread(target=target, args=args, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def check_all(rows: list[dict], settings: EvaluatorSettings, workers: int, budget_gb: float,
              results: Results) -> None:
    """Correctness of every derived seed, ``workers`` evaluations at once within the memory budget."""
    jobs = [Job(r["name"], r["source"], r["footprint_gb"]) for r in rows if r.get("seed") and "check" not in r]
    seeds = {r["name"]: r.get("seed") for r in rows}
    again: list[Job] = []

    def work(admission: MemoryAdmission, last_try: bool) -> None:
        evaluator = Evaluator(settings, "cuda", 0)
        try:
            while (job := admission.take()) is not None:
                try:
                    result = evaluator.evaluate(job.name, job.source, seeds[job.name])
                finally:
                    admission.done(job)
                if "out of memory" in result.reason.lower() and not last_try:
                    again.append(job)  # another evaluation may have held the memory: alone, later
                    continue
                results.update(job.name, check=_eval_record(result))
                print(f"check {job.name}: {result.status.value} {result.reason[:100]}", flush=True)
        finally:
            evaluator.close()

    in_threads(max(1, min(workers, len(jobs))), work, MemoryAdmission(jobs, budget_gb), False)
    if again:
        work(MemoryAdmission(again, 0.0), True)


def timed_already(row: dict, tolerance: str) -> bool:
    """Whether an earlier run (--seeds-from) timed every kernel ``evo run`` starts this task from
    (``starting_kernels``: a twin, a split-K one, the derived seed)."""
    record = row.get("eval") or {}
    if record.get("status", "not timed") == "not timed":
        return False
    return record.get("kernels", 1) >= len(starting_kernels(row["seed"], tolerance))


def best_of(records: list[dict]) -> dict:
    """The evaluation a task's seeds start the search from: the fastest correct one, or the first."""
    correct = [r for r in records if r["status"] == "correct" and r.get("runtime_ms")]
    best = dict(min(correct, key=lambda r: r["runtime_ms"]) if correct else records[0])
    best["kernels"] = len(records)
    best["per_kernel"] = [{k: r.get(k) for k in ("status", "runtime_ms", "speedup_vs_compiled", "reason")}
                          for r in records]
    return best


def time_all(rows: list[dict], settings: EvaluatorSettings, deadline: float, results: Results,
             budget_gb: float = float("inf"), again: str = "^$") -> None:
    """Time every checked seed, as ``evo run`` seeds it (each of ``starting_kernels``; the record
    keeps the fastest correct one, ``eval``, and each one's, ``eval.per_kernel``); with
    ``settings.pipeline`` > 1 that many evaluations are in flight, as the footprints fit
    ``budget_gb``, each timed alone on the GPU (the evaluator's gate); a record timed already is
    timed again where its name matches ``again``."""
    evaluator = Evaluator(settings, "cuda", 0)
    jobs = []
    for row in rows:
        if re.search(again, row["name"]):
            row.pop("check", None)
        elif timed_already(row, settings.tolerance):
            continue
        if not row.get("seed") or row.get("check", {}).get("status", "correct") != "correct":
            continue
        jobs.append(Job(row["name"], row["source"], row["footprint_gb"]))
    seeds = {r["name"]: r.get("seed") for r in rows}
    admission = MemoryAdmission(jobs, budget_gb)

    def work() -> None:
        while (job := admission.take()) is not None:
            try:
                if time.monotonic() > deadline:
                    results.update(job.name, eval={"status": "not timed", "reason": "deadline"})
                    continue
                records = [_eval_record(evaluator.evaluate(job.name, job.source, kernel))
                           for kernel in starting_kernels(seeds[job.name], settings.tolerance)]
            finally:
                admission.done(job)
            best = best_of(records)
            results.update(job.name, eval=best)
            print(f"time {job.name}: {best['status']} speedup={best['speedup']} "
                  f"vs_compiled={best['speedup_vs_compiled']} wall={best['wall_s']:.1f}s "
                  f"({len(records)} kernels)", flush=True)

    try:
        in_threads(evaluator.slots, work)
    finally:
        evaluator.close()


def keep_capture(folder: Path, name: str, reply) -> None:
    """Inductor's output, dynamo's graph inputs and the seed of one problem, as files."""
    folder.mkdir(exist_ok=True)
    stem = name.replace("/", "__")
    for suffix, text in (("inductor.py.txt", reply.inductor_code), ("seed.py", reply.source),
                         ("graph_inputs.json", json.dumps(reply.graph_inputs))):
        if text:
            (folder / f"{stem}.{suffix}").write_text(text)


def pack(folder: Path) -> None:
    """The captures as one tarball (the folder goes)."""
    if folder.is_dir():
        with tarfile.open(folder.with_suffix(".tar.gz"), "w:gz") as tar:
            tar.add(folder, arcname=folder.name)
        shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--workers", type=int, default=16, help="sandbox workers deriving seeds side by side")
    parser.add_argument("--check-workers", type=int, default=0, help="evaluators checking correctness side by side")
    parser.add_argument("--budget-gb", type=float, default=60.0, help="footprint estimates running at once")
    parser.add_argument("--derive-only", action="store_true")
    parser.add_argument("--seeds-from", nargs="+", help="JSON of earlier runs: their seeds, not derived again")
    parser.add_argument("--only", help="a regular expression on level/problem names")
    parser.add_argument("--again", default="^$", help="a regular expression: these timed again, records or not")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=0.5)
    parser.add_argument("--time-workers", type=int, default=1,
                        help="evaluations in flight while timing (evaluator.pipeline; each timed alone)")
    parser.add_argument("--tolerance", choices=("strict", "kernelbench"), default="strict",
                        help="the evaluator's; it picks the precision of the twin seeds")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--deadline", type=float, default=float("inf"), help="seconds from the start")
    parser.add_argument("--captures", action="store_true", help="inductor's output and the seeds, as a tarball")
    args = parser.parse_args()
    began = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    import triton

    meta = {"command": " ".join(["python3", *sys.argv]), "torch": torch.__version__, "triton": triton.__version__,
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
            "reps": args.reps, "budget_s": args.budget_s, "time_workers": args.time_workers,
            "tolerance": args.tolerance}
    rows = problems(args.folders, args.only)
    results = Results(out, rows, meta)
    cache = tempfile.mkdtemp(prefix="kb-triton-cache-")  # shared: the check compiles, the timing reuses
    settings = EvaluatorSettings(device="cuda", timeout_s=args.timeout, cache_dir=cache,
                                 timing=TimingSettings(warmup=2, warmup_s=0.1, reps=args.reps, budget_s=args.budget_s),
                                 pipeline=args.time_workers, tolerance=args.tolerance)

    def record(name: str, outcome, seconds: float) -> None:  # outcome: a PreparedTask
        check, reply = outcome.check, outcome.seed or DerivedSeed(ok=False)
        if args.captures:
            keep_capture(out / "captures", name, reply)
        error = reply.error or ("" if check.ok else f"the reference failed: {check.error}")
        results.update(name, seed=reply.source, derive={
            "ok": reply.ok, "error": str(error)[:400], "seconds": round(seconds, 1),
            "traceback": (reply.traceback or check.traceback or "")[-2000:]})
        print(f"derive {name}: {'ok' if reply.ok else str(error)[:120]}", flush=True)

    if args.seeds_from:
        for row in rows:
            results.update(row["name"], derive={"error": "not in --seeds-from"})
        for path in args.seeds_from:
            for old in json.loads(Path(path).read_text())["problems"]:
                if old["name"] in results.rows and old.get("derive") and "seconds" in old["derive"]:
                    results.rows[old["name"]].pop("check", None)
                    results.rows[old["name"]].pop("eval", None)
                    results.update(old["name"], **{k: old[k] for k in ("seed", "derive", "check", "eval") if k in old})
    else:
        # derived under the tolerance timed, as a run derives them (TF32 convolutions under kernelbench's)
        evaluator = Evaluator(EvaluatorSettings(device="cuda", timeout_s=args.timeout, cache_dir=cache,
                                                tolerance=args.tolerance), "cuda", 0)
        try:
            # every worker busy until the last problem (batches waited for their slowest: a GEMM's
            # max-autotune holds the GPU alone), each outcome written as it comes
            began_deriving = time.monotonic()
            for name, prepared in evaluator.prepare_stream([Preparation(r["name"], r["source"], True) for r in rows],
                                                           args.workers):
                record(name, prepared, time.monotonic() - began_deriving)
        finally:
            evaluator.close()
        meta["derive_s"] = round(time.monotonic() - began, 1)
        pack(out / "captures")
    if not args.derive_only:
        if args.check_workers:
            quick = EvaluatorSettings(device="cuda", timeout_s=args.timeout, cache_dir=cache, compile_baseline=False,
                                      tolerance=args.tolerance,
                                      timing=TimingSettings(warmup=0, reps=1, budget_s=0.0))
            check_all(list(results.rows.values()), quick, args.check_workers, args.budget_gb, results)
            meta["check_s"] = round(time.monotonic() - began, 1)
        time_all(list(results.rows.values()), settings, began + args.deadline, results, args.budget_gb,
                 args.again)
    meta["total_s"] = round(time.monotonic() - began, 1)
    results.save()
    (out / "kernelbench_seeds.md").write_text(markdown(list(results.rows.values()), meta))
    print((out / "kernelbench_seeds.md").read_text().split("\n## ")[0])


if __name__ == "__main__":
    main()

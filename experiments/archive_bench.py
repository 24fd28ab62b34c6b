"""Archive benchmark: insert rate, parent-sampling latency and resume time at scale.

    python experiments/archive_bench.py --sizes 10000 100000 1000000 --out experiments/archive_bench.md

For each size N it builds an archive of N evaluated programs (8 tasks, 4
islands, ~3 KB sources made from the built-in seeds with varied tunables,
80% correct) with bulk inserts, then measures through the public API:

- inserts: ``add_program`` + ``record_evaluation`` (two transactions) per program, with
  the source's hash and descriptors computed beforehand, as the proposing island does
  (``--rng-meta``: each also saves an RNG state in ``meta``, as the run loop does);
- sampling: ``sample_parent`` and ``inspirations(k=2)``, each call timed;
- resume: a fresh ``Archive`` plus the controller's start-up queries
  (``Controller._start``: counters, pending programs, ready tasks).

Targets (issue 4): sampling p99 < 2 ms at 10^6 programs; >= 2,000 inserts/s; resume < 5 s.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from sqlalchemy import insert

from archive import Archive
from evo.core.descriptors import cell_key, describe
from archive.models import CellRow, EvaluationRow, LineageRow, ProgramRow
from evaluator import EvalResult, Status
from evo.loop.controller import Controller
from evo.loop.loop_state import RNG_META
from evo.loop.run_settings import RunSettings
from evo.core.kernel_source import find_tunables, normalized_hash, with_values
from evo.core.task import load_tasks
from islands.migration import MigrationSettings

WITH_RNG_META = False

ISLANDS = 4
BATCH = 20_000


class _NoBackend:
    island_count = ISLANDS
    evaluator_count = slot_count = 1
    races = False


def _variants(tasks, rng, count):
    """``count`` distinct (task, source) pairs: seeds with random tunable values."""
    seeds = [(t.name, t.seeds[0], find_tunables(t.seeds[0])) for t in tasks]
    for i in range(count):
        name, source, tunables = seeds[i % len(seeds)]
        changes = {t: int(2 ** rng.integers(0, 13)) for t in tunables}
        yield name, with_values(source, changes) + f"\n# variant {i}\n"


def build(url: str, tasks, n: int, rng) -> None:
    archive = Archive(url)
    engine = archive.engine
    cells: dict[tuple[str, int, str], tuple[int, float]] = {}
    key_cache: dict[str, str] = {}
    now = time.time()
    pid = 0
    pending_rows = []
    for name, source in _variants(tasks, rng, n):
        pid += 1
        island = pid % ISLANDS
        # The descriptor depends only on the tunables: cache by the source without its variant tag.
        body = source.rsplit("\n# variant", 1)[0]
        key = key_cache.get(body) or key_cache.setdefault(body, cell_key(describe(body)))
        correct = rng.random() < 0.8
        speedup = float(rng.lognormal(0, 0.5)) if correct else None
        pending_rows.append((pid, name, island, source, key, correct, speedup))
        if correct and ((name, island, key) not in cells or speedup > cells[(name, island, key)][1]):
            cells[(name, island, key)] = (pid, speedup)
        if len(pending_rows) == BATCH or pid == n:
            with engine.begin() as conn:
                conn.execute(insert(ProgramRow), [dict(
                    id=p, task=t, island=isl, generation=p // 100, operator="constants" if p > 8 else "seed",
                    source=src, source_hash=hashlib.sha256(src.encode()).hexdigest()[:32], cell_key=k,
                    created_at=now) for p, t, isl, src, k, _, _ in pending_rows])
                conn.execute(insert(LineageRow), [dict(child_id=p, parent_id=max(1, p - 8), role="parent")
                                                  for p, *_ in pending_rows if p > 8])
                conn.execute(insert(EvaluationRow), [dict(
                    program_id=p, status="correct" if ok else "incorrect", reason="", speedup=sp,
                    runtime_ms=1.0, ref_runtime_ms=sp, runtime_spread=0.02, timing_representative=True,
                    device="bench", shapes_checked=4, error="", wall_s=2.0, created_at=now)
                    for p, _, _, _, _, ok, sp in pending_rows])
            pending_rows.clear()
    with engine.begin() as conn:
        conn.execute(insert(CellRow), [dict(task=t, island=i, key=k, program_id=p, fitness=f, updated_at=now)
                                       for (t, i, k), (p, f) in cells.items()])
    archive.close()


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(url: str, tasks, rng) -> dict:
    t0 = time.perf_counter()
    archive = Archive(url)
    controller = Controller(settings=RunSettings(dir="/tmp", budget_evaluations=10**9), tasks=tasks,
                            archive=archive, backend=_NoBackend(), migration=MigrationSettings())
    controller._start()
    resume_s = time.perf_counter() - t0

    names = [t.name for t in tasks]
    sample_ms, inspire_ms = [], []
    for i in range(2000):
        task, island = names[i % len(names)], i % ISLANDS
        t = time.perf_counter()
        parent = archive.sample_parent(task, island, rng)
        sample_ms.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        archive.inspirations(task, parent.id, 2, rng)
        inspire_ms.append((time.perf_counter() - t) * 1e3)

    # Source analysis (hash, descriptors) is done by the island that proposes a child, in
    # parallel; it is timed apart from the archive's own work.
    sources = [(task, source + f"# new {i}\n") for i, (task, source) in enumerate(_variants(tasks, rng, 2000))]
    t = time.perf_counter()
    analysed = [(task, source, normalized_hash(source), describe(source)) for task, source in sources]
    analysis_ms = (time.perf_counter() - t) * 1e3 / len(sources)
    t = time.perf_counter()
    for i, (task, source, source_hash, descriptors) in enumerate(analysed):
        # The run loop saves its RNG state with every program and evaluation (exact resume).
        meta = {RNG_META: json.dumps(rng.bit_generator.state)} if WITH_RNG_META else None
        program = archive.add_program(task=task, island=i % ISLANDS, generation=1, operator="constants",
                                      source=source, parent_ids=(1,), source_hash=source_hash,
                                      descriptors=descriptors, meta=meta)
        archive.record_evaluation(program, EvalResult(status=Status.CORRECT, speedup=float(rng.lognormal()),
                                                      runtime_ms=1.0, ref_runtime_ms=1.0), meta=meta)
    insert_rate = len(sources) / (time.perf_counter() - t)
    archive.close()
    return {
        "resume_s": resume_s, "insert_per_s": insert_rate, "analysis_ms": analysis_ms,
        "sample_median_ms": statistics.median(sample_ms), "sample_p99_ms": percentile(sample_ms, 0.99),
        "inspire_median_ms": statistics.median(inspire_ms), "inspire_p99_ms": percentile(inspire_ms, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--dir", default=None, help="where the databases go (default: a temp dir)")
    parser.add_argument("--out", default=None, help="write a markdown table here")
    parser.add_argument("--rng-meta", action="store_true",
                        help="save an RNG state with every insert, as the run loop does")
    args = parser.parse_args()
    global WITH_RNG_META
    WITH_RNG_META = args.rng_meta
    tasks = load_tasks("default")
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in args.sizes:
            url = f"sqlite:///{Path(tmp) / f'bench_{n}.db'}"
            rng = np.random.default_rng(n)
            t = time.perf_counter()
            build(url, tasks, n, rng)
            built = time.perf_counter() - t
            size_mb = (Path(tmp) / f"bench_{n}.db").stat().st_size / 2**20
            row = {"programs": n, "db_mb": size_mb, "build_s": built, **measure(url, tasks, rng)}
            rows.append(row)
            print(row, flush=True)
            (Path(tmp) / f"bench_{n}.db").unlink()
    lines = [
        "| programs | db size | resume (s) | inserts/s | sample median / p99 (ms) | inspirations median / p99 (ms) "
        "| source analysis per child (ms, in the island) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(f"| {r['programs']:,} | {r['db_mb']:.0f} MB | {r['resume_s']:.2f} | {r['insert_per_s']:,.0f} | "
                     f"{r['sample_median_ms']:.2f} / {r['sample_p99_ms']:.2f} | "
                     f"{r['inspire_median_ms']:.2f} / {r['inspire_p99_ms']:.2f} | {r['analysis_ms']:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(
            f"# Archive benchmark\n\nMachine: {platform.machine()}, {platform.python_version()}, "
            f"SQLite (WAL) on local disk.\nCommand: `python experiments/archive_bench.py --sizes "
            f"{' '.join(map(str, args.sizes))} --out {args.out}`\n\n{table}\n")


if __name__ == "__main__":
    main()

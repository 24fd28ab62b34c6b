"""What an offline operator's first child does to a run's seeds, timed beside them on one GPU.

    python3 experiments/operator_probe.py --run RUN_DIR --problems .kbsrc/search \
        --operator persistent_tiles --operator persistent_reduction [--tolerance strict] \
        [--rounds 2] [--twins] [--deadline S] [--dry-run] --out $OUT/operator_probe.json

``--operator seed_twin`` is no operator: its "child" is the twin a run now seeds before a derived
seed (``evo.core.dot_precision.seed_kernels``: GEMM templates, and strict convolutions on the taps
loop), timed beside that seed.  ``--twins``: the operators' parents are those twins, the seeds a run
started today begins from, rather than the seeds the archive holds; ``--current-library``: with
this tree's convolution library (``evaluator/conv_kernel.py``) in place of the one they carry.

For every seed (generation 0) in ``RUN_DIR``'s archive whose problem file is in ``--problems`` and
that the operator applies to, the engine's evaluator (one process, one GPU, the run's tolerance or
``--tolerance``) evaluates the seed and the operator's child (its first proposal, RNG seed 0), in
turn, ``--rounds`` times, so that both meet the GPU in the same states; the report keeps each
one's verdicts and median time, and the child's time over the seed's.  ``--dry-run`` only says
which seeds get a child (no GPU needed).  Written after every problem, so a call cut short keeps
what it measured.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # precision_probe's library swap

from evo.core.dot_precision import seed_kernels  # noqa: E402
from evo.core.program import Program  # noqa: E402
from operators import Context  # noqa: E402


@dataclasses.dataclass
class _Twin:
    source: str
    note: str


class _SeedTwin:
    """The twin a run seeds before a derived seed, as if it were the seed's child."""
    name = "seed_twin"

    def __init__(self, tolerance: str):
        self.tolerance = tolerance

    def applies_to(self, parent: Program) -> bool:
        return len(seed_kernels(parent.source, self.tolerance)) > 1

    def propose(self, context: Context, rng) -> _Twin:
        first = seed_kernels(context.parent.source, self.tolerance)[0]
        return _Twin(first, first.splitlines()[0].lstrip("# "))


def _operator(name: str, tolerance: str):
    """The offline operator ``name`` with its defaults (``conf/operator/<name>.yaml``'s)."""
    if name == "seed_twin":
        return _SeedTwin(tolerance)
    if name == "split_reduction":
        from operators.split_reduction import SplitReduction
        return SplitReduction()
    if name == "fuse_epilogue":
        from operators.fuse_epilogue import FuseEpilogue
        return FuseEpilogue()
    if name == "persistent_tiles":
        from operators.persistent_tiles import PersistentTiles
        return PersistentTiles()
    if name == "persistent_reduction":
        from operators.persistent_reduction import PersistentReduction
        return PersistentReduction()
    if name == "dot_precision":
        from operators.precision import DotPrecision
        return DotPrecision(tolerance=tolerance)
    if name == "split_k":
        from operators.split_k import SplitK
        return SplitK()
    if name == "load_hints":
        from operators.load_hints import LoadHints
        return LoadHints()
    raise SystemExit(f"unknown operator {name!r}: persistent_tiles, persistent_reduction, dot_precision, "
                     "split_k, load_hints, split_reduction, fuse_epilogue or seed_twin")


def _seeds(run: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(f"file:{run / 'archive.db'}?mode=ro", uri=True)
    return db.execute("SELECT task, source FROM programs WHERE generation = 0 AND operator = 'seed' "
                      "ORDER BY task, id").fetchall()


def _tolerance(run: Path) -> str:
    text = (run / "config.yaml").read_text() if (run / "config.yaml").exists() else ""
    return "kernelbench" if "tolerance: kernelbench" in text else "strict"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--problems", type=Path, required=True, help="the folder of the run's problem files")
    parser.add_argument("--operator", action="append", required=True)
    parser.add_argument("--tolerance", choices=("strict", "kernelbench"), default=None,
                        help="default: the run's evaluator.tolerance")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="", help="a substring of the task names")
    parser.add_argument("--twins", action="store_true", help="the operators' parents: the seeds' twins (see above)")
    parser.add_argument("--current-library", action="store_true",
                        help="the seeds' convolution library replaced by this tree's first (as a seed derived today)")
    parser.add_argument("--deadline", type=float, default=float("inf"), help="seconds; later pairs are skipped")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    tolerance = args.tolerance or _tolerance(args.run)
    operators = [_operator(name, tolerance) for name in args.operator]
    pairs = []
    for task, source in _seeds(args.run):
        problem = args.problems / f"{task}.py"
        if args.only not in task or not problem.exists():
            continue
        if args.current_library:
            from precision_probe import _current_library
            source = _current_library(source) or source
        if args.twins:
            source = seed_kernels(source, tolerance)[0]
        parent = Program(id=0, task=task, island=0, generation=0, operator="seed", source=source)
        for op in operators:
            if not op.applies_to(parent):
                continue
            proposal = op.propose(Context(task_name=task, task_source=problem.read_text(), parent=parent),
                                  np.random.default_rng(0))
            if proposal.source is not None:
                pairs.append((task, problem, op.name, proposal.note, source, proposal.source))
    print(f"{len(pairs)} seeds get a child: " + ", ".join(f"{t} ({o})" for t, _, o, *_ in pairs), flush=True)
    report = {"run": str(args.run), "tolerance": tolerance, "operators": args.operator, "rounds": args.rounds,
              "twins": args.twins,
              "rows": [{"task": t, "operator": o, "note": n} for t, _, o, n, *_ in pairs]}
    if args.dry_run:
        _write(args.out, report)
        return
    from evaluator import Evaluator, EvaluatorSettings

    evaluator = Evaluator(EvaluatorSettings(device="cuda", timeout_s=300, tolerance=tolerance), "cuda", 0)
    report["rows"], began = [], time.monotonic()
    try:
        for task, problem, name, note, seed, child in pairs:
            if time.monotonic() - began > args.deadline:
                report["rows"].append({"task": task, "operator": name, "skipped": "deadline"})
                continue
            runs = {"seed": [], "child": []}
            for _ in range(args.rounds):
                for label, source in (("seed", seed), ("child", child)):
                    result = evaluator.evaluate(task, problem.read_text(), source)
                    runs[label].append({"status": result.status.value, "reason": result.reason[:200],
                                        "ms": result.runtime_ms, "compile_ms": result.compiled_runtime_ms})
            row = {"task": task, "operator": name, "note": note, **runs}
            for label in runs:
                times = [r["ms"] for r in runs[label] if r["status"] == "correct" and r["ms"]]
                row[f"{label}_ms"] = statistics.median(times) if times else None
            if row["seed_ms"] and row["child_ms"]:
                row["child_over_seed"] = row["child_ms"] / row["seed_ms"]
            report["rows"].append(row)
            print(f"{task} {name}: seed {row['seed_ms']} ms, child {row['child_ms']} ms "
                  f"({[r['status'] for r in runs['child']]})", flush=True)
            _write(args.out, report)
    finally:
        evaluator.close()
    _write(args.out, report)


def _write(out: Path, report: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

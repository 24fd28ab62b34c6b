"""What the dot-precision operator (operators/precision.py) does to seeds with fp32 matrix products.

    python3 experiments/precision_probe.py --problems .kbsrc/level1 .kbsrc/level2 --seeds .kbsrc/seeds

For every problem whose seed (``<level>__<problem>.seed.py`` in ``--seeds``, as
``kernelbench_seeds.py --captures`` keeps them) has a dot with a precision argument, the engine
evaluates, on the GPU, the seed and its ``tf32x3`` child under the strict tolerance, and its plain
``tf32`` child under the kernelbench tolerance: verdict, speedup over eager and over
torch.compile.  Writes ``precision_probe.json`` under $OUT after every problem.
``--variants`` picks among the three; ``--conv-library`` takes only seeds with the engine's
convolution and swaps in this tree's (to measure a change to ``evaluator/conv_kernel.py``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluator import Evaluator, EvaluatorSettings  # noqa: E402
from operators.precision import with_precision  # noqa: E402

VARIANTS = (("seed", None, "strict"), ("tf32x3", "tf32x3", "strict"), ("tf32", "tf32", "kernelbench"))


def _row(result) -> dict:
    return {"status": result.status.value, "reason": result.reason[:300], "speedup": result.speedup,
            "vs_compile": result.speedup_vs_compiled, "runtime_ms": result.runtime_ms,
            "eager_ms": result.ref_runtime_ms, "compile_ms": result.compiled_runtime_ms}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", nargs="+", required=True)
    parser.add_argument("--seeds", required=True)
    parser.add_argument("--only", default="", help="a substring of the problem names")
    parser.add_argument("--variants", default="seed,tf32x3,tf32", help="which of seed, tf32x3, tf32")
    parser.add_argument("--conv-library", action="store_true",
                        help="only seeds with a convolution, their library replaced by evaluator/conv_kernel.py's")
    args = parser.parse_args()
    variants = [v for v in VARIANTS if v[0] in args.variants.split(",")]
    base = EvaluatorSettings(device="cuda", timeout_s=300)
    evaluators = {t: Evaluator(dataclasses.replace(base, tolerance=t), "cuda", 0)
                  for t in {tolerance for _, _, tolerance in variants}}
    rows = []
    try:
        for folder in args.problems:
            for path in sorted(Path(folder).glob("*.py")):
                name = f"{Path(folder).name}__{path.stem}"
                seed_path = Path(args.seeds) / f"{name}.seed.py"
                if args.only not in name or not seed_path.exists():
                    continue
                seed, task = seed_path.read_text(), path.read_text()
                if with_precision(seed, "tf32x3") is None:
                    continue
                if args.conv_library:
                    seed = _current_library(seed)
                    if seed is None:
                        continue
                row = {"problem": name}
                for label, precision, tolerance in variants:
                    source = seed if precision is None else with_precision(seed, precision)
                    row[label] = _row(evaluators[tolerance].evaluate(path.stem, task, source))
                    print(name, label, row[label]["status"], row[label]["speedup"], row[label]["vs_compile"],
                          row[label]["reason"][:100], file=sys.stderr, flush=True)
                rows.append(row)
                _write(rows)
    finally:
        for ev in evaluators.values():
            ev.close()
    print(json.dumps(_write(rows), indent=1))


def _current_library(seed: str) -> str | None:
    """``seed`` with its convolution library (from its first ``@triton.jit`` helper, ``_epilogue``,
    or ``_store_tile`` or ``_conv_kernel`` in older seeds, to the end of ``_count``) replaced by this
    tree's; None for a seed without one."""
    from evaluator.conv_seed import CONV_LIBRARY

    starts = [seed.find(f"@triton.jit\ndef {name}(") for name in ("_epilogue", "_store_tile", "_conv_kernel")]
    start = min((s for s in starts if s >= 0), default=-1)
    end = seed.find("return count\n", start)
    if start < 0 or end < 0:
        return None
    library = CONV_LIBRARY
    if 'input_precision="tf32"' in seed[start:end]:  # a seed under the kernelbench tolerance: its dots in TF32
        library = library.replace('input_precision="ieee"', 'input_precision="tf32"')
    return seed[:start] + library + seed[end + len("return count\n"):]


def _write(rows: list[dict]) -> dict:
    summary = {}
    for label, _, _ in VARIANTS:
        if not rows or label not in rows[0]:
            continue
        ratios = [r[label]["vs_compile"] for r in rows if r[label]["status"] == "correct" and r[label]["vs_compile"]]
        summary[label] = {"correct": sum(r[label]["status"] == "correct" for r in rows), "of": len(rows),
                          "geomean_vs_compile": round(statistics.geometric_mean(ratios), 3) if ratios else None}
    report = {"summary": summary, "rows": rows}
    out = os.environ.get("OUT")
    if out:
        Path(out, "precision_probe.json").write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()

"""The split-K first seed of KernelBench's long-K products at other tiles and splits, timed by
the engine's evaluator against torch.compile (issue 33, deliverable 1).

    python3 experiments/split_seed_probe.py RECORDS.json --only REGEX --out $OUT/split_seed.json \\
        [--tiles 32 64 128] [--scales 0.5 1 2]

For each problem of ``RECORDS`` (``kernelbench_seeds.py``'s JSON, seeds included) matching
``--only``, every kernel ``seed_kernels`` starts it from (the split-precision twin, the exact
seed) is split by ``operators.split_k.split_seed`` with its tile widened to each of ``--tiles``,
then its SPLIT_K multiplied by each of ``--scales``; each is evaluated as a run evaluates a
child (staged checks, timing interleaved with eager, the torch.compile baseline).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from evaluator import Evaluator, EvaluatorSettings
from evaluator.evaluator import TimingSettings
from evo.core.dot_precision import seed_kernels
from evo.core.kernel_source import find_tunables, with_values
from operators.split_k import split_seed


def variants(seed: str, tolerance: str, tiles: list[int], scales: list[float]) -> list[tuple[str, str]]:
    """(label, kernel) of every split variant, duplicates dropped."""
    found, seen = [], set()
    kernels = seed_kernels(seed, tolerance)
    for i, kernel in enumerate(kernels):
        precision = "twin" if i + 1 < len(kernels) else "exact"
        for tile in tiles:
            split = split_seed(kernel, tile)
            if split is None:
                continue
            parts = [t for t in find_tunables(split) if t.name.endswith("SPLIT_K")]
            for scale in scales:
                child = with_values(split, {t: max(1, int(t.value * scale)) for t in parts})
                if child not in seen:
                    seen.add(child)
                    found.append((f"{precision} tile {tile} split {'/'.join(str(max(1, int(t.value * scale))) for t in parts)}",
                                  child))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records")
    parser.add_argument("--only", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiles", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.5, 1, 2])
    parser.add_argument("--tolerance", default="strict")
    args = parser.parse_args()
    import torch

    settings = EvaluatorSettings(device="cuda", timeout_s=150, tolerance=args.tolerance,
                                 timing=TimingSettings(warmup=2, warmup_s=0.1, reps=20, budget_s=0.5))
    evaluator = Evaluator(settings, "cuda", 0)
    rows = []
    out = {"meta": {"command": " ".join(["python3", *sys.argv]), "device": torch.cuda.get_device_name(),
                    "torch": torch.__version__}, "rows": rows}
    try:
        for problem in json.loads(Path(args.records).read_text())["problems"]:
            if not re.search(args.only, problem["name"]) or not problem.get("seed"):
                continue
            for label, kernel in variants(problem["seed"], args.tolerance, args.tiles, args.scales):
                r = evaluator.evaluate(problem["name"], problem.get("source") or Path(problem["path"]).read_text(), kernel)
                rows.append({"problem": problem["name"], "variant": label, "status": r.status.value,
                             "runtime_ms": r.runtime_ms, "compiled_ms": r.compiled_runtime_ms,
                             "reason": (r.reason or "")[:200]})
                ratio = r.runtime_ms / r.compiled_runtime_ms if r.runtime_ms and r.compiled_runtime_ms else None
                print(f"{problem['name']} {label}: {r.status.value} {r.runtime_ms} ms, compile "
                      f"{r.compiled_runtime_ms} ms" + (f", {ratio:.2f}x its time" if ratio else ""), flush=True)
                Path(args.out).write_text(json.dumps(out, indent=1))
    finally:
        evaluator.close()


if __name__ == "__main__":
    main()

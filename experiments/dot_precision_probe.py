"""The fp32 dot precisions Triton offers on tensor cores, measured for accuracy and time, then on
KernelBench seeds through the engine's evaluator (issue 33: GEMM seeds under the strict tolerance).

    python3 experiments/dot_precision_probe.py --out $OUT/dots.json \\
        [--records RECORDS.json --only REGEX] [--precisions tf32x3 bf16x6 bf16x3]

Part 1, a plain tiled product (ours, the Triton tutorial's shape of loop) at 1024 x 8192 x 8192,
operands as level2/14's (``rand`` by ``randn``), for each ``input_precision``: its time
(``triton.testing.do_bench``, median), its error against a float64 product (largest, relative to
the largest output; mean, to see a bias), and how many of the 1024 row sums (level2/14 sums each
row of the product) fall outside the strict check (atol = rtol = 1e-4).  cuBLAS in fp32 beside it.

Part 2, for each problem of ``RECORDS`` (``kernelbench_seeds.py``'s JSON, seeds included) matching
``--only``: its seed with every dot moved to each precision (split precisions with the warps
``warps_for_split_precision`` gives them), evaluated as a run evaluates a child.  With
``--archive RUN/archive.db --tasks DIR`` the seeds are a run's instead: its first seed of each
task as it is (``seed``: the twin), and its exact one (the last) moved to each precision with the
engine's convolutions gathering channels-last, the split copy off, so that their dots are the
library's (``K<n>_USE_SPLIT_TF32 = 0``).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import triton
import triton.language as tl


@triton.jit
def _product(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
    # a is M x K row-major, b is N x K row-major (a Linear's weight), c = a @ b.T
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * grid_n)
    rows = min(grid_m - group * GROUP_M, GROUP_M)
    pid_m = group * GROUP_M + pid % rows
    pid_n = (pid % (GROUP_M * grid_n)) // rows
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + rn[None, :] * K + (k + rk)[:, None])
        acc += tl.dot(a, b, input_precision=PRECISION)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def part1(precisions: list[str]) -> list[dict]:
    import torch
    from triton.testing import do_bench

    M, N, K = 1024, 8192, 8192
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.rand(M, K, device="cuda", generator=gen)
    b = torch.randn(N, K, device="cuda", generator=gen)
    exact = a.double() @ b.double().T
    sums = exact.sum(1)
    rows = []

    def record(label, fn):
        try:
            out = fn()
            torch.cuda.synchronize()
        except Exception as e:  # a precision this Triton lacks
            rows.append({"precision": label, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            print(label, "failed:", str(e)[:200], flush=True)
            return
        err = out.double() - exact
        row_err = out.double().sum(1) - sums
        outside = int((row_err.abs() > 1e-4 + 1e-4 * sums.abs()).sum())
        ms = do_bench(fn, warmup=50, rep=300, return_mode="median")
        row = {"precision": label, "ms": ms,
               "max_rel_error": float(err.abs().max() / exact.abs().max()),
               "mean_error_over_rms": float(err.mean() / err.pow(2).mean().sqrt()),
               "rms_error": float(err.pow(2).mean().sqrt()),
               "row_sums_outside_strict": outside, "row_sum_max_error": float(row_err.abs().max())}
        rows.append(row)
        print(json.dumps(row), flush=True)

    torch.backends.cuda.matmul.allow_tf32 = False
    record("cublas fp32", lambda: a @ b.T)
    for precision in ["ieee", "tf32", *precisions]:
        c = torch.empty(M, N, device="cuda")
        tile = (128, 128, 32, 8) if precision != "ieee" else (64, 64, 32, 8)
        warps = 8 if precision != "ieee" else 4

        def launch(precision=precision, c=c, tile=tile, warps=warps):
            bm, bn, bk, gm = tile
            _product[(triton.cdiv(M, bm) * triton.cdiv(N, bn),)](a, b, c, M, N, K, bm, bn, bk, gm, precision,
                                                                 num_warps=warps, num_stages=3)
            return c
        record(precision, launch)
    return rows


def archive_problems(archive: str, tasks: str, only: str) -> list[dict]:
    """The exact seed of each task of a run's archive matching ``only``, as ``part2`` reads a record:
    its convolutions switched to the channels-last gather, the split copy off."""
    import sqlite3

    rows = sqlite3.connect(archive).execute("select task, source from programs where operator = 'seed' "
                                            "order by id").fetchall()
    first, last = {}, {}  # the run's first seed of a task (its twin) and last (the exact one)
    for task, source in rows:
        first.setdefault(task, source)
        last[task] = source
    unsplit = {r"^(K\d+_USE_CHANNELS_LAST = )0$": r"\g<1>1", r"^(K\d+_USE_SPLIT_TF32 = )1$": r"\g<1>0"}
    problems = []
    for task, source in sorted(last.items()):
        if re.search(only, task):
            for pattern, to in unsplit.items():
                source = re.sub(pattern, to, source, flags=re.MULTILINE)
            problems.append({"name": task, "seed": first[task], "exact": source,
                             "source": (Path(tasks) / f"{task}.py").read_text()})
    return problems


def part2(problems: list[dict], only: str, precisions: list[str], tolerance: str) -> list[dict]:
    import torch  # noqa: F401
    from evaluator import Evaluator, EvaluatorSettings
    from evaluator.evaluator import TimingSettings
    from evo.core.dot_precision import warps_for_split_precision, with_precision

    settings = EvaluatorSettings(device="cuda", timeout_s=150, tolerance=tolerance,
                                 timing=TimingSettings(warmup=2, warmup_s=0.1, reps=20, budget_s=0.5))
    evaluator = Evaluator(settings, "cuda", 0)
    rows = []
    try:
        for problem in problems:
            if not re.search(only, problem["name"]) or not problem.get("seed"):
                continue
            source = problem.get("source") or Path(problem["path"]).read_text()
            for precision in ["seed", *precisions]:
                kernel = (problem["seed"] if precision == "seed"
                          else with_precision(problem.get("exact", problem["seed"]), precision))
                if kernel is None:
                    continue
                if precision not in ("seed", "tf32", "ieee"):
                    kernel, _ = warps_for_split_precision(kernel)
                r = evaluator.evaluate(problem["name"], source, kernel)
                ratio = r.runtime_ms / r.compiled_runtime_ms if r.runtime_ms and r.compiled_runtime_ms else None
                rows.append({"problem": problem["name"], "precision": precision, "status": r.status.value,
                             "runtime_ms": r.runtime_ms, "compiled_ms": r.compiled_runtime_ms,
                             "over_compile": ratio, "reason": (r.reason or "")[:300]})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        evaluator.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--records")
    parser.add_argument("--archive", help="a run's archive.db: its exact seeds, convolutions channels-last")
    parser.add_argument("--tasks", help="with --archive: the folder of its problem files")
    parser.add_argument("--only", default="^$")
    parser.add_argument("--precisions", nargs="+", default=["tf32x3", "bf16x6", "bf16x3"])
    parser.add_argument("--tolerance", default="strict")
    parser.add_argument("--skip-part1", action="store_true")
    args = parser.parse_args()
    import torch

    out = {"meta": {"command": " ".join(["python3", *sys.argv]), "device": torch.cuda.get_device_name(),
                    "torch": torch.__version__, "triton": triton.__version__}}
    if not args.skip_part1:
        out["part1"] = part1(args.precisions)
        Path(args.out).write_text(json.dumps(out, indent=1))
    if args.records or args.archive:
        problems = (archive_problems(args.archive, args.tasks, args.only) if args.archive
                    else json.loads(Path(args.records).read_text())["problems"])
        out["part2"] = part2(problems, args.only, args.precisions, args.tolerance)
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

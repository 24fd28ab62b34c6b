"""Re-check every kernel of this library against its reference on this machine: ``python -m PACKAGE.selftest``.

For each task and kernel: the reference ``Model`` and the kernel's ``ModelNew``
are built alike (seed 0, ``get_init_inputs()``), fed the same inputs from
``get_inputs`` (seeded) on every shape set of the task, compared with the
task's tolerances, then timed side by side on the shape set of each bucket the
kernel serves, the way the engine's evaluator times them (interleaved; on a GPU
CUDA events, L2 flushed before each call).  Prints a table, one line per
kernel and bucket; exits 1 on any mismatch or error, 2 when it cannot run here.
Without a GPU it runs only with ``TRITON_INTERPRET=1`` (Triton's interpreter,
small shapes: a bucket of a larger shape set is timed on the largest that
runs; timings not representative).  Copied unchanged into every exported package.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import statistics
import sys
import time
import traceback

import torch

from . import _runtime

# Used when a task sets no ATOL/RTOL (the engine's defaults).
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float64: 1e-6}
CPU_MAX_NUMEL = 1 << 16  # under the interpreter, larger shape sets are skipped
L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2


def _flatten(value) -> list:
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flatten(v)]
    return [value]


CHUNK = 1 << 22  # elements compared at a time: no float64 copy of a whole (multi-GB) output


def _close(e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float) -> tuple[bool, float]:
    """(whether ``a`` matches ``e`` within the tolerances, NaN where NaN; the largest absolute error)."""
    ef = e.reshape(-1) if e.is_contiguous() else e.contiguous().reshape(-1)
    af = a.reshape(-1) if a.is_contiguous() else a.contiguous().reshape(-1)
    ok, worst = True, 0.0
    for start in range(0, ef.numel(), CHUNK):
        ec, ac = ef[start:start + CHUNK].double(), af[start:start + CHUNK].double()
        ok = ok and torch.allclose(ac, ec, atol=atol, rtol=rtol, equal_nan=True)
        if ac.numel():
            worst = max(worst, float((ac - ec).abs().nan_to_num(nan=float("inf")).max()))
    return ok, worst


def mismatch(expected, actual, atol, rtol) -> str | None:
    exp, act = _flatten(expected), _flatten(actual)
    if len(exp) != len(act):
        return f"{len(act)} outputs, the reference returns {len(exp)}"
    for e, a in zip(exp, act):
        if not isinstance(e, torch.Tensor):
            if e != a:
                return f"returned {a!r}, the reference returns {e!r}"
            continue
        if not isinstance(a, torch.Tensor) or a.shape != e.shape or a.dtype != e.dtype:
            return f"returned {getattr(a, 'dtype', type(a))} {tuple(getattr(a, 'shape', ()))}, " \
                   f"expected {e.dtype} {tuple(e.shape)}"
        tol = TOLERANCE.get(e.dtype, 1e-4)
        a_tol, r_tol = tol if atol is None else atol, tol if rtol is None else rtol
        if not e.is_floating_point():
            if not torch.equal(a, e):
                return "integer values differ"
            continue
        ok, err = _close(e, a, a_tol, r_tol)
        if not ok:
            return f"values beyond atol={a_tol:g}, rtol={r_tol:g} (max abs error {err:.3g})"
    return None


def _inputs(problem, shape: dict, seed: int, device: str) -> list:
    """Seeded inputs, created on the device where ``get_inputs`` allows it (as the engine makes them)."""
    if device != "cpu":
        torch.manual_seed(seed)
        try:
            with torch.device(device):
                return [v.to(device) if isinstance(v, torch.Tensor) else v for v in problem.get_inputs(**shape)]
        except Exception:  # a get_inputs that needs the CPU
            pass
    torch.manual_seed(seed)
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in problem.get_inputs(**shape)]


def shape_label(shape: dict) -> str:
    """A shape set as the engine's archive names it: ``rows=4096,cols=8192``, or ``default``."""
    return ",".join(f"{k}={v}" for k, v in shape.items()) or "default"


def _shape_sets(problem, device: str) -> list[tuple[dict, int]]:
    """(shape set, input elements) of the shape sets that run here: all on a GPU, small ones on the CPU."""
    shapes = [dict(s) for s in getattr(problem, "SHAPES", None) or [{}]]
    try:
        with torch.device("meta"):  # sizes without allocating
            sizes = [_runtime._numel(problem.get_inputs(**s)) for s in shapes]
    except Exception:  # a get_inputs that meta tensors cannot run
        sizes = [_runtime._numel(problem.get_inputs(**s)) for s in shapes]
    sets = list(zip(shapes, sizes))
    if device == "cuda":
        return sets
    return [(s, n) for s, n in sets if n <= CPU_MAX_NUMEL] or [min(sets, key=lambda sn: sn[1])]


def bucket_shape(sets: list[tuple[dict, int]], max_numel: int | None) -> dict:
    """The shape set a bucket is timed on: the largest of at most ``max_numel`` elements (None: the largest)."""
    fitting = [sn for sn in sets if max_numel is None or sn[1] <= max_numel]
    if not fitting:  # every shape set that runs here is larger than the bucket
        return min(sets, key=lambda sn: sn[1])[0]
    return max(reversed(fitting), key=lambda sn: sn[1])[0]  # on equal sizes the later shape set


def _side_by_side_ms(new, ref, device: str, reps: int, budget_s: float = 2.0, batch: int = 8):
    """Medians of ``new()`` and ``ref()`` timed interleaved, as the engine's evaluator times them.

    On a GPU: CUDA events around each call, L2 flushed before it outside the timed window,
    ``batch`` pairs of calls queued between synchronisations behind a GPU spin, a batch timed
    again if the GPU reached a call before the host had queued it (so the host's launch path is
    never counted, however slow this process launches), after a warm-up of at least 0.2 s.  On the CPU: the wall clock.
    """
    warm_until = time.monotonic() + (0.2 if device == "cuda" else 0.0)
    done = 0
    while done < 3 or time.monotonic() < warm_until:
        new(), ref()
        done += 1
    times = {new: [], ref: []}
    if device == "cuda":
        flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(2 * batch)]
        origin = torch.cuda.Event(enable_timing=True)
        cycles_per_ms, lead_ms = _spin_rate(), 1.0
    deadline = time.monotonic() + budget_s
    for first in range(0, reps, batch):
        calls = [fn for i in range(first, min(reps, first + batch))
                 for fn in ((new, ref) if i % 2 == 0 else (ref, new))]
        if device == "cuda":
            for _ in range(4):  # a batch whose GPU reached a call before the host queued it: again
                torch.cuda.synchronize()
                began = time.perf_counter()  # the GPU meets the origin event no earlier
                origin.record()
                if cycles_per_ms:
                    torch.cuda._sleep(int(lead_ms * cycles_per_ms))
                queued = []
                for fn, (start, end) in zip(calls, events):
                    flush.zero_()
                    start.record()
                    fn()
                    end.record()
                    queued.append((time.perf_counter() - began) * 1e3)
                torch.cuda.synchronize()
                reached = [origin.elapsed_time(start) for _, (start, _) in zip(calls, events)]
                ahead = max(q - (r - reached[0]) for q, r in zip(queued, reached))
                late, lead_ms = any(q > r for q, r in zip(queued, reached)), min(100.0, max(1.0, 2.0 * ahead))
                if not late or not cycles_per_ms:
                    break
            for fn, (start, end) in zip(calls, events):
                times[fn].append(start.elapsed_time(end))
        else:
            for fn in calls:
                start = time.perf_counter()
                fn()
                times[fn].append((time.perf_counter() - start) * 1e3)
        if len(times[new]) >= 3 and time.monotonic() > deadline:
            break
    return statistics.median(times[new]), statistics.median(times[ref])


@functools.cache  # once per process, not once per bucket timed
def _spin_rate() -> float:
    """GPU clock cycles per millisecond of ``torch.cuda._sleep`` (0.0 where torch lacks it)."""
    if not hasattr(torch.cuda, "_sleep"):
        return 0.0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1 << 22)  # the first launch loads the kernel
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(1 << 22)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end)
    return (1 << 22) / ms if ms > 0 else 0.0


def check_kernel(task: str, kernel: str, device: str, buckets: list[dict], seeds=(0, 1), reps: int = 100) -> dict:
    """Check the kernel on every shape set that runs here, then time it on the shape set of each bucket
    (``max_numel``) in ``buckets``: ``timings`` lists per bucket the shape timed, ms, ref_ms and speedup."""
    problem = _runtime.reference(task)
    atol, rtol = getattr(problem, "ATOL", None), getattr(problem, "RTOL", None)
    torch.manual_seed(0)
    ref = problem.Model(*problem.get_init_inputs()).to(device).eval()
    torch.manual_seed(0)
    new = importlib.import_module(f"{__package__}.kernels.{kernel}").ModelNew(*problem.get_init_inputs())
    new = new.to(device).eval()
    sets = _shape_sets(problem, device)
    timings = []
    with torch.no_grad():
        for shape, _ in sets:
            for seed in seeds:
                # Inputs of their own for each: a reference may change its inputs in place.
                expected = ref(*_inputs(problem, shape, seed, device))
                problem_text = mismatch(expected, new(*_inputs(problem, shape, seed, device)), atol, rtol)
                del expected
                if problem_text:
                    return dict(ok=False, detail=f"shape {shape_label(shape)}, seed {seed}: {problem_text}")
        for bucket in buckets:
            shape = bucket_shape(sets, bucket["max_numel"])
            inputs = _inputs(problem, shape, seeds[0], device)
            new_ms, ref_ms = _side_by_side_ms(lambda: new(*inputs), lambda: ref(*inputs), device,
                                              reps if device == "cuda" else 5)
            timings.append(dict(shape=shape_label(shape), ms=new_ms, ref_ms=ref_ms,
                                speedup=ref_ms / new_ms if new_ms > 0 else None))
    return dict(ok=True, detail=f"{len(sets)} shapes x {len(seeds)} seeds", timings=timings)


def served_buckets(entry: dict, kernel: dict) -> list[dict]:
    """The dispatch buckets the kernel serves on its device class; a kernel kept beside the best
    (``top_k``) serves none and is timed on the largest bucket it was measured on."""
    served = [b for b in entry["buckets"] if (b["kernel"], b["device_class"]) == (kernel["module"],
                                                                                  kernel["device_class"])]
    if served:
        return served
    largest = max(kernel["shapes"], key=lambda s: (s["max_numel"] is None, s["max_numel"] or 0))
    return [dict(name=largest["bucket"], max_numel=largest["max_numel"], speedup=largest["speedup"])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}.selftest", description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="*", help="only these tasks")
    parser.add_argument("--reps", type=int, default=None, help="timed calls per kernel (default 20, 3 on the CPU)")
    args = parser.parse_args(argv)
    if torch.cuda.is_available():
        device = "cuda"
        print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    elif os.environ.get("TRITON_INTERPRET") == "1":
        device = "cpu"
        print(f"no GPU: the kernels run under Triton's interpreter on the CPU (small shapes only); "
              f"timings are not representative; torch {torch.__version__}")
    else:
        print("the selftest needs a CUDA GPU; without one set TRITON_INTERPRET=1 to run the kernels under "
              "Triton's interpreter on the CPU", file=sys.stderr)
        return 2
    reps = args.reps or (20 if device == "cuda" else 3)
    tasks = _runtime.manifest()["tasks"]
    unknown = sorted(set(args.tasks or ()) - set(tasks))
    if unknown:
        print(f"no task {', '.join(unknown)} in this library; it has {', '.join(tasks)}", file=sys.stderr)
        return 2
    print(f"{'task':<16} {'kernel':<30} {'bucket':<22} {'result':<7} {'speedup':>8} {'recorded':>9}  detail")
    failed = 0
    for task, entry in tasks.items():
        if args.tasks and task not in args.tasks:
            continue
        for k in entry["kernels"]:
            buckets = served_buckets(entry, k)
            try:
                r = check_kernel(task, k["module"], device, buckets, reps=reps)
            except Exception as exc:  # a kernel that raises is a failure to report, not a crash
                r = dict(ok=False, detail=f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
                traceback.print_exc(file=sys.stderr)
            failed += not r["ok"]
            for b, t in zip(buckets, r.get("timings") or [{}] * len(buckets)):
                speedup = f"{t['speedup']:.3f}x" if t.get("speedup") else "-"
                timed = f"; timed on {t['shape']}" if t.get("shape") not in (None, b["name"]) else ""
                print(f"{task:<16} {k['module']:<30} {b['name']:<22} {'ok' if r['ok'] else 'FAILED':<7} "
                      f"{speedup:>8} {b['speedup']:>8.3f}x  {k['device_class']}: {r['detail']}{timed}")
    print(f"{failed} failed" if failed else "all kernels match their references")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

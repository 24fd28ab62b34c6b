"""Side-by-side timing of a candidate and its reference (runs in the sandbox).

The two callables are timed interleaved, call by call, on the same device and
in the same process, so a speedup is a ratio of medians measured under the
same conditions.  On a GPU each timed call is bracketed by CUDA events, the
device is synchronised around it and the L2 cache is flushed before it,
outside the timed window (the flush also hides the host's launch overhead).  On the CPU (Triton's interpreter) wall-clock time
is taken, and the result is marked as not representative of a GPU.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2


@dataclass
class Timings:
    median_ms: float
    spread: float  # (p80 - p20) / median
    samples: int


def summarize(samples_ms: list[float]) -> Timings:
    ordered = sorted(samples_ms)
    med = statistics.median(ordered)
    p20 = ordered[int(0.2 * (len(ordered) - 1))]
    p80 = ordered[int(0.8 * (len(ordered) - 1))]
    return Timings(median_ms=med, spread=(p80 - p20) / med if med > 0 else 0.0, samples=len(ordered))


def time_side_by_side(candidate, reference, device: str, *, warmup: int, reps: int,
                      budget_s: float, warmup_s: float = 0.0) -> tuple[Timings, Timings]:
    """Median timings of ``candidate()`` and ``reference()``, interleaved.

    Warm-up runs both at least ``warmup`` times and for at least ``warmup_s``
    seconds: a GPU that just sat idle needs that long to reach its clocks.
    """
    warm_until = time.monotonic() + warmup_s
    done = 0
    while done < warmup or (time.monotonic() < warm_until and done < 10_000):
        candidate()
        reference()
        done += 1
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    if device.startswith("cuda"):
        timer = _CudaTimer(torch.device(device))
    else:
        timer = _WallTimer()
    cand, ref = [], []
    deadline = time.monotonic() + budget_s
    for i in range(reps):
        # Alternate which one goes first so neither always follows the other.
        order = ((candidate, cand), (reference, ref)) if i % 2 == 0 else ((reference, ref), (candidate, cand))
        for fn, out in order:
            out.append(timer.time(fn))
        if i >= 2 and time.monotonic() > deadline:
            break
    return summarize(cand), summarize(ref)


class _WallTimer:
    def time(self, fn) -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3


class _CudaTimer:
    def __init__(self, device: torch.device):
        self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def time(self, fn) -> float:
        torch.cuda.synchronize()  # nothing else in flight
        # The flush evicts L2 outside the timed window; while the GPU runs it, the CPU gets
        # through the Python launch path of ``fn``, so launch overhead (larger for Triton than
        # for eager PyTorch) is not counted as kernel time, as with triton.testing.do_bench.
        self.flush.zero_()
        self.start.record()
        fn()
        self.end.record()
        torch.cuda.synchronize()
        return self.start.elapsed_time(self.end)

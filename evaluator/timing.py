"""Side-by-side timing of a candidate and its reference (runs in the sandbox).

The two callables are timed interleaved, call by call, on the same device and
in the same process, so a speedup is a ratio of medians measured under the
same conditions.  On a GPU each timed call is bracketed by CUDA events and
the L2 cache is flushed before it, outside the timed window; a few pairs of
calls are queued between device-wide synchronisations, so the host's launch
path is hidden behind the flush.  On the CPU (Triton's interpreter)
wall-clock time is taken, and the result is marked as not representative of
a GPU.
"""
from __future__ import annotations

import math
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


@dataclass
class SideBySide:
    """Timings of a candidate and a baseline taken interleaved, call by call."""

    candidate: Timings
    baseline: Timings
    ratio: float  # baseline median over candidate median: the speedup
    noise: float  # relative half-width of a ~95% interval of the ratio, from the paired samples


def summarize(samples_ms: list[float]) -> Timings:
    ordered = sorted(samples_ms)
    med = statistics.median(ordered)
    p20 = ordered[int(0.2 * (len(ordered) - 1))]
    p80 = ordered[int(0.8 * (len(ordered) - 1))]
    return Timings(median_ms=med, spread=(p80 - p20) / med if med > 0 else 0.0, samples=len(ordered))


def ratio_noise(candidate_ms: list[float], baseline_ms: list[float]) -> float:
    """Relative uncertainty of the speedup, from the ratios of adjacent (paired) calls.

    Pairing cancels slow drift (clocks, temperature) that hits both alike; the
    interval is that of a median, ~1.8 IQR / sqrt(n) (normal approximation).
    """
    ratios = sorted(b / c for c, b in zip(candidate_ms, baseline_ms) if c > 0)
    if len(ratios) < 3:
        return float("inf")
    med = statistics.median(ratios)
    q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
    return 1.82 * (q3 - q1) / math.sqrt(len(ratios)) / med if med > 0 else float("inf")


def time_side_by_side(candidate, baseline, device: str, *, warmup: int, reps: int,
                      budget_s: float, warmup_s: float = 0.0, batch: int = 8) -> SideBySide:
    """Median timings of ``candidate()`` and ``baseline()``, interleaved.

    Warm-up runs both at least ``warmup`` times and for at least ``warmup_s``
    seconds: a GPU that just sat idle needs that long to reach its clocks.
    On a GPU, ``batch`` pairs of calls are queued between synchronisations
    (as ``triton.testing.do_bench`` does), so the GPU never waits for the
    host's launch path inside a timed window; ``batch=1`` synchronises
    around every pair.
    """
    warm_until = time.monotonic() + warmup_s
    done = 0
    while done < warmup or (time.monotonic() < warm_until and done < 10_000):
        candidate()
        baseline()
        done += 1
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    batch = max(1, batch)
    timer = _CudaTimer(torch.device(device), 2 * batch) if device.startswith("cuda") else _WallTimer()
    cand, base = [], []
    deadline = time.monotonic() + budget_s
    for first in range(0, reps, batch):
        # Alternate which one goes first so neither always follows the other.
        pairs = [(candidate, baseline) if i % 2 == 0 else (baseline, candidate)
                 for i in range(first, min(reps, first + batch))]
        times = timer.run([fn for pair in pairs for fn in pair])
        for (a, _), t_a, t_b in zip(pairs, times[0::2], times[1::2]):
            cand.append(t_a if a is candidate else t_b)
            base.append(t_b if a is candidate else t_a)
        if len(cand) >= 3 and time.monotonic() > deadline:
            break
    c, b = summarize(cand), summarize(base)
    return SideBySide(candidate=c, baseline=b, ratio=b.median_ms / c.median_ms if c.median_ms > 0 else 0.0,
                      noise=ratio_noise(cand, base))


class _WallTimer:
    def run(self, calls) -> list[float]:
        times = []
        for fn in calls:
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return times


class _CudaTimer:
    def __init__(self, device: torch.device, slots: int):
        self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        self.events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                       for _ in range(slots)]

    def run(self, calls) -> list[float]:
        torch.cuda.synchronize()  # nothing else in flight
        for fn, (start, end) in zip(calls, self.events):
            # The flush evicts L2 outside the timed window; while the GPU runs it, the host
            # queues ``fn``, so the host's launch path is not counted as kernel time.
            self.flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for _, (start, end) in zip(calls, self.events)]

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
    """Median timings of ``candidate()`` and ``baseline()``, interleaved (see :func:`time_interleaved`)."""
    return time_interleaved(candidate, {"baseline": baseline}, device, warmup=warmup, reps=reps,
                            budget_s=budget_s, warmup_s=warmup_s, batch=batch)["baseline"]


def time_interleaved(candidate, baselines: dict, device: str, *, warmup: int, reps: int,
                     budget_s: float, warmup_s: float = 0.0, batch: int = 8) -> dict[str, SideBySide]:
    """The candidate timed against each baseline, all interleaved call by call.

    One round calls the candidate and every baseline once, in an order that
    rotates from round to round so none always follows another; a baseline's
    ratio pairs its calls with the candidate's of the same round.  Warm-up
    runs every callable at least ``warmup`` times and for at least ``warmup_s``
    seconds: a GPU that just sat idle needs that long to reach its clocks.  On
    a GPU, ``batch`` rounds are queued between synchronisations (as
    ``triton.testing.do_bench`` does), so the GPU never waits for the host's
    launch path inside a timed window; ``batch=1`` synchronises around every round.
    """
    names = list(baselines)
    calls = [candidate, *(baselines[n] for n in names)]
    warm_until = time.monotonic() + warmup_s
    done = 0
    while done < warmup or (time.monotonic() < warm_until and done < 10_000):
        for fn in calls:
            fn()
        done += 1
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    batch = max(1, batch)
    width = len(calls)
    timer = _CudaTimer(torch.device(device), width * batch) if device.startswith("cuda") else _WallTimer()
    samples = [[] for _ in calls]  # per callable, in round order
    deadline = time.monotonic() + budget_s
    for first in range(0, reps, batch):
        orders = [[(i + r) % width for i in range(width)] for r in range(first, min(reps, first + batch))]
        times = timer.run([calls[i] for order in orders for i in order])
        for k, order in enumerate(orders):
            for slot, i in enumerate(order):
                samples[i].append(times[k * width + slot])
        if len(samples[0]) >= 3 and time.monotonic() > deadline:
            break
    cand = summarize(samples[0])
    out = {}
    for j, name in enumerate(names, start=1):
        base = summarize(samples[j])
        out[name] = SideBySide(candidate=cand, baseline=base,
                               ratio=base.median_ms / cand.median_ms if cand.median_ms > 0 else 0.0,
                               noise=ratio_noise(samples[0], samples[j]))
    return out


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

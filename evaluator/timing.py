"""Side-by-side timing of a candidate and its reference (runs in the sandbox).

The two callables are timed interleaved, call by call, on the same device and
in the same process, so a speedup is a ratio of medians measured under the
same conditions.  On a GPU each timed call is bracketed by CUDA events and
the L2 cache is flushed before it, outside the timed window; a few pairs of
calls are queued between device-wide synchronisations behind a GPU spin, so
the host's launch path never falls inside a timed window.  On the CPU (Triton's interpreter)
wall-clock time is taken, and the result is marked as not representative of
a GPU.
"""
from __future__ import annotations

import contextlib
import functools
import gc
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


def timing_args(timing: dict) -> dict:
    """The keyword arguments of :func:`time_interleaved` from a request's ``timing`` settings."""
    return dict(warmup=timing["warmup"], reps=timing["reps"], budget_s=timing["budget_s"],
                warmup_s=timing.get("warmup_s", 0.0), batch=timing.get("batch", 8),
                precision=timing.get("precision", 0.0), min_reps=timing.get("min_reps", 20))


def time_side_by_side(candidate, baseline, device: str, **timing) -> SideBySide:
    """Median timings of ``candidate()`` and ``baseline()``, interleaved (see :func:`time_interleaved`)."""
    return time_interleaved(candidate, {"baseline": baseline}, device, **timing)["baseline"]


def time_interleaved(candidate, baselines: dict, device: str, *, warmup: int, reps: int,
                     budget_s: float, warmup_s: float = 0.0, batch: int = 8, precision: float = 0.0,
                     min_reps: int = 20, samples: list[list[float]] | None = None,
                     stats: dict | None = None, before_call=None, after_call=None,
                     after_batch=None) -> dict[str, SideBySide]:
    """The candidate timed against each baseline, all interleaved call by call.

    One round calls the candidate and every baseline once, in an order that
    rotates from round to round so none always follows another; a baseline's
    ratio pairs its calls with the candidate's of the same round.  Warm-up
    runs every callable at least ``warmup`` times and for at least ``warmup_s``
    seconds: a GPU that just sat idle needs that long to reach its clocks.  On
    a GPU, ``batch`` rounds are queued between synchronisations (as
    ``triton.testing.do_bench`` does), so the GPU never waits for the host's
    launch path inside a timed window; ``batch=1`` synchronises around every round.

    ``samples`` (per callable, candidate first) goes on from an earlier round of the same
    callables, extended in place: ``reps`` counts the rounds it holds (racing's short round
    becomes the start of the full one).

    ``precision`` > 0 stops after a batch once at least ``min_reps`` rounds are in and every
    baseline's ratio noise (:func:`ratio_noise`) is at most ``precision``: a stable kernel is
    not timed longer than its speedup needs.

    ``stats`` (on a GPU) gains the batches run and how many of them were run again because the host
    was late (``batches``, ``reruns``), added to what it holds.

    ``before_call`` runs before each of the candidate's calls, before its window opens (and before
    the L2 flush ahead of it), ``after_call`` after each, once its window has closed (its end event
    queued), as a baseline's own ``after`` method (if it has one) after each of its calls, and
    ``after_batch`` after each batch (and each warm-up round) has been synchronised: the timed
    calls' checks (``evaluator.timed_checks``) work there, outside every timed window.
    """
    names = list(baselines)
    calls = [candidate, *(baselines[n] for n in names)]
    hooks = [(before_call, after_call), *((None, getattr(baselines[n], "after", None)) for n in names)]
    batch = max(1, batch)
    width = len(calls)
    timer = _CudaTimer(torch.device(device), width * batch) if device.startswith("cuda") else _WallTimer()
    # Warm-up goes through the timer, L2 flushes and all: the GPU reaches the state the timed rounds
    # keep (a first timed batch after flush-free calls ran slower on an H100: throughput_bench.md, round 11).
    warm_until = time.monotonic() + warmup_s
    done = 0
    while done < warmup or (time.monotonic() < warm_until and done < 10_000):
        timer.run(calls, hooks)
        if after_batch is not None:
            after_batch()
        done += 1
    if samples is None:
        samples = [[] for _ in calls]  # per callable, in round order
    elif len(samples) != width or len({len(s) for s in samples}) != 1:
        raise ValueError("samples to go on from need one list per callable, all of one length")
    deadline = time.monotonic() + budget_s
    for first in range(len(samples[0]), reps, batch):
        orders = [[(i + r) % width for i in range(width)] for r in range(first, min(reps, first + batch))]
        times = timer.run([calls[i] for order in orders for i in order], [hooks[i] for order in orders for i in order])
        if after_batch is not None:
            after_batch()
        for k, order in enumerate(orders):
            for slot, i in enumerate(order):
                samples[i].append(times[k * width + slot])
        if len(samples[0]) >= 3 and time.monotonic() > deadline:
            break
        if precision > 0 and len(samples[0]) >= min_reps and all(
                ratio_noise(samples[0], samples[j]) <= precision for j in range(1, width)):
            break
    if stats is not None and isinstance(timer, _CudaTimer):
        stats["batches"] = stats.get("batches", 0) + timer.batches
        stats["reruns"] = stats.get("reruns", 0) + timer.reruns
    cand = summarize(samples[0])
    out = {}
    for j, name in enumerate(names, start=1):
        base = summarize(samples[j])
        out[name] = SideBySide(candidate=cand, baseline=base,
                               ratio=base.median_ms / cand.median_ms if cand.median_ms > 0 else 0.0,
                               noise=ratio_noise(samples[0], samples[j]))
    return out


@contextlib.contextmanager
def _collector_paused():
    """Python's garbage collector held off while a batch is queued (as ``timeit`` does): a collection
    of a large heap takes milliseconds of the host, inside a call's window on the CPU, or, on a GPU,
    long enough for the spin ahead of the batch to run out."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _WallTimer:
    def run(self, calls, hooks) -> list[float]:
        with _collector_paused():
            return self._run(calls, hooks)

    def _run(self, calls, hooks) -> list[float]:
        times = []
        for fn, (before, after) in zip(calls, hooks):
            if before is not None:
                before()
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
            if after is not None:
                after()
        return times


class _CudaTimer:
    """CUDA events around each call, L2 flushed before it, a batch of calls queued behind a spin.

    The GPU spins (``torch.cuda._sleep``) at the head of every batch while the host queues the
    whole batch, so no timed window ever waits for the host's launch path: for a kernel of a few
    microseconds, Triton's launch path (tens of microseconds of Python) can outlast the L2 flush
    that would otherwise hide it, and the window would then time the host, by an amount that
    depends on the process.  A batch in which the GPU may have reached a call before the host had
    queued it (:func:`host_late`) is timed again behind a longer spin.
    """

    def __init__(self, device: torch.device, slots: int):
        self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        self.origin = torch.cuda.Event(enable_timing=True)
        self.events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                       for _ in range(slots)]
        self.cycles_per_ms = spin_rate()
        self.lead_ms = 1.0  # how long the GPU spins while the host queues a batch
        self.batches = self.reruns = 0

    def run(self, calls, hooks) -> list[float]:
        with _collector_paused():
            return self._run(calls, hooks)

    def _run(self, calls, hooks) -> list[float]:
        for attempt in range(4):
            torch.cuda.synchronize()  # nothing else in flight
            origin = time.perf_counter()  # the GPU meets the origin event no earlier than this
            self.origin.record()
            if self.cycles_per_ms:
                torch.cuda._sleep(int(self.lead_ms * self.cycles_per_ms))
            queued_ms = []  # per call: when the host had queued all of it, ms after the origin
            for fn, (before, after), (start, end) in zip(calls, hooks, self.events):
                if before is not None:  # queued ahead of the flush: outside the window
                    before()
                self.flush.zero_()  # evicts L2 outside the timed window
                start.record()
                fn()
                end.record()
                queued_ms.append((time.perf_counter() - origin) * 1e3)
                if after is not None:  # after the window: its work queued behind the end event
                    after()
            torch.cuda.synchronize()
            reached_ms = [self.origin.elapsed_time(start) for _, (start, _) in zip(calls, self.events)]
            late, self.lead_ms = host_late(queued_ms, reached_ms), next_lead(queued_ms, reached_ms)
            self.batches += 1
            if not late or not self.cycles_per_ms or attempt == 3:
                break
            self.reruns += 1
        return [start.elapsed_time(end) for _, (start, end) in zip(calls, self.events)]


def host_late(queued_ms: list[float], reached_ms: list[float]) -> bool:
    """Whether the GPU may have waited for the host inside a timed window.

    ``queued_ms[k]``: host time, from just before the batch's origin event was recorded, by which
    call k and its end event were queued; ``reached_ms[k]``: GPU time from the origin event to call
    k's start event.  The GPU met the origin no earlier than the host recorded it, so it reached
    call k's window no earlier than ``reached_ms[k]`` on the host's clock: a call queued by then
    kept its window busy.  For a kernel of milliseconds the calls before it cover the host's
    queueing; for one of microseconds only the spin does.
    """
    return any(q > r for q, r in zip(queued_ms, reached_ms))


def next_lead(queued_ms: list[float], reached_ms: list[float], *, floor_ms: float = 1.0,
              cap_ms: float = 100.0) -> float:
    """The spin for the next batch: twice the longest the host's queueing ran ahead of the GPU's own
    work in this one (the spin excluded), within [floor, cap]."""
    if not queued_ms:
        return floor_ms
    ahead = max(q - (r - reached_ms[0]) for q, r in zip(queued_ms, reached_ms))
    return min(cap_ms, max(floor_ms, 2.0 * ahead))


@functools.cache  # once per process: each timing (every shape set with time_shapes=all) reuses it
def spin_rate() -> float:
    """GPU clock cycles per millisecond of ``torch.cuda._sleep`` (0.0 where torch lacks it)."""
    if not hasattr(torch.cuda, "_sleep"):
        return 0.0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 1 << 22
    torch.cuda._sleep(cycles)  # the first launch loads the kernel
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end)
    return cycles / ms if ms > 0 else 0.0

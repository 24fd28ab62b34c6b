"""What was timed is held to the checks' rules (runs in the sandbox).

The checks (``evaluator.correctness``) call the candidate a few dozen times; timing calls it
hundreds more.  A candidate that behaves only while checked (its own kernels for the first
calls, PyTorch after them; an output remembered from an earlier call) would be scored on calls
nobody checked.  So the timed calls are checked too:

- they rotate over several input sets of distinct storage and values (:func:`input_sets`), made
  before timing, so an output remembered by identity, pointer or shape is wrong or gains nothing;
- :class:`TimedCalls` runs a seeded sample of them (the first, a few at random, one in each
  doubling of the call count, and one after the last) under the smoke test's guards: each must complete its own Triton launches and
  dispatch no PyTorch operator but glue.  The monitor poisons nothing there, so a sampled call
  does the same device work as any other; its host overhead falls before its timed window (behind
  the spin that leads each batch, or the calls before it), or the batch is timed again;
- the round of calls after the last timed one is checked against the reference, each output
  against the reference's for its set (:func:`check_outputs`), once the caller's stream alone is
  synchronised;
- on a GPU one batch of calls runs under ``torch.profiler`` (:func:`triton_share`): at least
  ``triton_share_min`` of its device time must be in the candidate's own Triton kernels, on the
  caller's stream.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from evaluator.calls import Failure, call, make_inputs
from evaluator.compare import mismatch
from evaluator.guards import (CandidateMonitor, attempted_launches, call_violation, install_launch_counter,
                              launch_count, uninstall_launch_counter)
from evaluator.result import Status

MB = 1 << 20


def _bytes(values) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def input_sets(problem, shape: dict, seed: int, device: str, timing: dict, first: list) -> list[list]:
    """``first`` and more input sets of the shape, seeded apart: ``timing["input_sets"]`` in all, or 2
    where the extra sets would hold more than ``timing["input_sets_mb"]``."""
    wanted = int(timing.get("input_sets", 1))
    budget = float(timing.get("input_sets_mb", float("inf"))) * MB
    if wanted > 2 and (wanted - 1) * _bytes(first) > budget:
        wanted = 2
    return [first, *(make_inputs(problem, shape, seed + 7919 * k, device) for k in range(1, wanted))]


def in_turn(model, sets: list[list], stage: str):
    """``model`` called on the input sets in turn.  Every timed callable is called once per
    round, so candidate and baselines of one round see the same set."""
    turn = iter(range(1 << 62))
    return lambda: call(model, sets[next(turn) % len(sets)], stage)


def sampled_calls(samples: int, first_calls: int, seed: int, doublings: int = 24) -> set[int]:
    """Call numbers (from 0) to guard: the first; ``samples`` drawn at random from the first
    ``first_calls``; and one drawn from each doubling [2^k, 2^(k+1)), so that however long timing
    goes on (warm-up runs by the clock) calls late in it are guarded too, about log2(calls) in all."""
    rng = random.Random(seed)
    pool = range(1, max(2, first_calls))
    late = {rng.randrange(1 << k, 1 << (k + 1)) for k in range(doublings)}
    return {0, *rng.sample(pool, min(samples, len(pool))), *late}


class TimedCalls:
    """The candidate as timing calls it: the input sets in turn (as :func:`in_turn`), the calls
    numbered in ``sampled`` run under the guards."""

    def __init__(self, model, sets: list[list], sampled: set[int], device: str):
        self.model, self.sets, self.sampled, self.device = model, sets, set(sampled), device
        self.calls = 0
        self.audited: list[int] = []  # numbers (from 1) of the calls that ran under the guards

    def __call__(self):
        number, inputs = self.calls, self.sets[self.calls % len(self.sets)]
        self.calls += 1
        if number in self.sampled:
            return self._guarded(number, inputs)
        return call(self.model, inputs, "timing")

    def _guarded(self, number: int, inputs: list):
        monitor = CandidateMonitor(poison=False)
        install_launch_counter()
        launched, attempted = launch_count(), attempted_launches()
        try:
            with monitor:
                out = call(self.model, inputs, f"timed call {number + 1}")
        finally:
            uninstall_launch_counter()
        violation = call_violation(monitor, launch_count() - launched, attempted_launches() - attempted)
        if violation:
            raise Failure(Status.REJECTED, f"timed call {number + 1}: {violation}")
        self.audited.append(number + 1)
        return out


def stream_synchronize(device: str) -> None:
    """The caller's stream only: work the candidate left on another stream is not waited for."""
    if device.startswith("cuda"):
        torch.cuda.current_stream().synchronize()


def check_outputs(timed: TimedCalls, reference, atol, rtol) -> int:
    """One more round of the timed sequence, each call's output checked against the reference's
    for its input set; the first of them under the guards (a candidate that changes late).

    The calls go on from the last timed one, on the same input sets in the same turn: to the
    candidate they are timed calls like the others.  Each output is checked as soon as the caller's
    stream alone is synchronised, then dropped, so no more than one is held at a time.
    Returns how many were checked.
    """
    timed.sampled.add(timed.calls)
    for _ in timed.sets:
        which = timed.calls % len(timed.sets)
        out = timed()
        stream_synchronize(timed.device)
        expected = call(reference, timed.sets[which], "reference")
        problem = mismatch(expected, out, atol, rtol)
        if problem:
            raise Failure(Status.INCORRECT, f"timed calls, input set {which + 1} of {len(timed.sets)} "
                                            f"(call {timed.calls}): {problem}")
        del out, expected
    return len(timed.sets)


def triton_share(timed: TimedCalls, kernel_names: set[str], calls: int, minimum: float) -> dict:
    """Profile ``calls`` candidate calls; reject unless ``minimum`` of the device time is the candidate's
    Triton kernels on the caller's stream.  Returns ``{"triton_share", "profiled_calls", "stream_checked"}``
    (the caller's stream is that of a marker kernel launched on it first: unchecked if none shows)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(1000)  # the marker: PyTorch's spin_kernel, on the caller's stream
        for _ in range(calls):
            timed()
        torch.cuda.synchronize()
    kernels = [(e.name, e.device_resource_id, e.time_range.elapsed_us()) for e in prof.events()
               if getattr(getattr(e, "device_type", None), "name", "") == "CUDA"]
    marker = next((k for k in kernels if "spin_kernel" in k[0]), None)
    if marker is not None:
        kernels.remove(marker)
    share = device_share(kernels, kernel_names, marker[1] if marker else None)
    if share.elsewhere:
        raise Failure(Status.REJECTED, f"the candidate's kernels {', '.join(sorted(share.elsewhere))} ran on "
                                       "another CUDA stream than the caller's: timed work must run on the "
                                       "caller's stream")
    if share.share < minimum:
        raise Failure(Status.REJECTED,
                      f"only {share.share:.0%} of the device time of {calls} timed calls is in the candidate's "
                      f"own Triton kernels (at least {minimum:.0%} needed); the rest: {share.top_others()}")
    return {"triton_share": round(share.share, 4), "profiled_calls": calls, "stream_checked": marker is not None}


@dataclass
class DeviceShare:
    share: float  # of the device time, in the candidate's kernels on the caller's stream
    others: dict[str, float]  # device time (us) of everything else, by kernel (or memcpy/memset) name
    elsewhere: set[str]  # the candidate's kernels seen on another stream

    def top_others(self, n: int = 3) -> str:
        top = sorted(self.others.items(), key=lambda kv: -kv[1])[:n]
        return "; ".join(f"{name[:80]} ({us:.0f} us)" for name, us in top) or "none"


def device_share(kernels: list[tuple[str, int, float]], kernel_names: set[str], caller: int | None) -> DeviceShare:
    """``kernels``: (name, stream, microseconds) of each device activity; ``caller``: the caller's stream
    (None: any).  Memcpy and memset (glue's copies and fills) count as not the candidate's."""
    own, others, elsewhere = 0.0, {}, set()
    for name, stream, us in kernels:
        ours = name in kernel_names
        if ours and (caller is None or stream == caller):
            own += us
            continue
        others[name] = others.get(name, 0.0) + us
        if ours:
            elsewhere.add(name)
    total = own + sum(others.values())
    return DeviceShare(own / total if total > 0 else 0.0, others, elsewhere)

"""What was timed is held to the checks' rules (runs in the sandbox).

The checks (``evaluator.correctness``) call the candidate a few dozen times; timing calls it
hundreds more.  A candidate that behaves only while checked (its own kernels for the first
calls, PyTorch after them; an output remembered from an earlier call) would be scored on calls
nobody checked.  So the timed calls are checked too:

- they rotate over several input sets of distinct storage and values (:func:`input_sets`), made
  before timing, so an output remembered by identity, pointer or shape is wrong or gains nothing;
- :class:`TimedCalls` runs a seeded sample of them (the first, a few at random, and one more after
  the last) under the smoke test's guards: each must complete its own Triton launches and
  dispatch no PyTorch operator but glue.  The monitor poisons nothing there, so a sampled call
  does the same device work as any other; its host overhead falls in the spin that leads each
  batch of timed calls, not in a timed window;
- the last output of each set is checked against the reference for that set
  (:func:`check_outputs`), once the caller's stream alone is synchronised;
- on a GPU one batch of calls runs under ``torch.profiler`` (:func:`triton_share`): at least
  ``triton_share_min`` of its device time must be in the candidate's own Triton kernels, on the
  caller's stream.
"""
from __future__ import annotations

import random

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


def sampled_calls(samples: int, first_calls: int, seed: int) -> set[int]:
    """The first call and ``samples`` more drawn at random from the first ``first_calls``."""
    rng = random.Random(seed)
    pool = range(1, max(2, first_calls))
    return {0, *rng.sample(pool, min(samples, len(pool)))}


class TimedCalls:
    """The candidate as timing calls it: the input sets in turn (as :func:`in_turn`), the last
    output of each set kept, and the calls numbered in ``sampled`` run under the guards."""

    def __init__(self, model, sets: list[list], sampled: set[int], device: str):
        self.model, self.sets, self.sampled, self.device = model, sets, set(sampled), device
        self.calls = 0
        self.last: dict[int, object] = {}
        self.audited: list[int] = []

    def __call__(self):
        number, which = self.calls, self.calls % len(self.sets)
        self.calls += 1
        if number in self.sampled:
            out = self._guarded(number, self.sets[which])
        else:
            out = call(self.model, self.sets[which], "timing")
        self.last[which] = out
        return out

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

    def one_more_guarded(self):
        """A call after the last timed one, under the guards (a candidate that changes late)."""
        self.sampled.add(self.calls)
        return self()


def stream_synchronize(device: str) -> None:
    """The caller's stream only: work the candidate left on another stream is not waited for."""
    if device.startswith("cuda"):
        torch.cuda.current_stream().synchronize()


def check_outputs(timed: TimedCalls, reference, atol, rtol) -> int:
    """The last output of each input set against the reference's for that set (each computed once);
    returns how many were checked."""
    timed.one_more_guarded()
    stream_synchronize(timed.device)
    for which in sorted(timed.last):
        expected = call(reference, timed.sets[which], "reference")
        problem = mismatch(expected, timed.last[which], atol, rtol)
        if problem:
            raise Failure(Status.INCORRECT,
                          f"timed calls, input set {which + 1} of {len(timed.sets)} (the last call on it): "
                          f"{problem}")
        del expected
    checked = len(timed.last)
    timed.last.clear()
    return checked


def triton_share(timed: TimedCalls, kernel_names: set[str], calls: int, minimum: float) -> dict:
    """Profile ``calls`` candidate calls; reject unless ``minimum`` of the device time is the candidate's
    Triton kernels on the caller's stream.  Returns ``{"triton_share", "profiled_calls"}``."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(1000)  # a marker kernel on the caller's stream: its stream is the caller's
        for _ in range(calls):
            timed()
        torch.cuda.synchronize()
    device_events = [e for e in prof.events() if _on_device(e)]
    marker = next((e for e in device_events if "spin_kernel" in e.name), None)
    caller = marker.device_resource_id if marker is not None else None
    own, other, elsewhere = 0.0, {}, set()
    for event in device_events:
        if event is marker:
            continue
        us = event.time_range.elapsed_us()
        ours = any(event.name == k or event.name.startswith(k) for k in kernel_names)
        on_caller = caller is None or event.device_resource_id == caller
        if ours and on_caller:
            own += us
        else:
            other[event.name] = other.get(event.name, 0.0) + us
            if ours:
                elsewhere.add(event.name)
    total = own + sum(other.values())
    share = own / total if total > 0 else 0.0
    if elsewhere:
        raise Failure(Status.REJECTED, f"the candidate's kernels {', '.join(sorted(elsewhere))} ran on another "
                                       "CUDA stream than the caller's: timed work must run on the caller's stream")
    if share < minimum:
        top = sorted(other.items(), key=lambda kv: -kv[1])[:3]
        named = "; ".join(f"{name[:80]} {us / total:.0%}" for name, us in top)
        raise Failure(Status.REJECTED,
                      f"only {share:.0%} of the device time of {calls} timed calls is in the candidate's own "
                      f"Triton kernels (at least {minimum:.0%} needed); the rest: {named or 'none'}")
    return {"triton_share": round(share, 4), "profiled_calls": calls}


def _on_device(event) -> bool:
    kind = getattr(event, "device_type", None)
    return kind is not None and kind.name == "CUDA" and event.time_range.elapsed_us() >= 0

"""Implausible speedups are verified again before they count (host side).

KernelBench's harness flags speedups above a threshold as likely reward hacking; an evolutionary
search would make such a score an elite, a parent and an exported kernel.  So a correct result
faster than ``evaluator.plausible_speedup`` (10x) over the best of eager and torch.compile is
evaluated again before it is accepted: in a fresh process (the worker forks a new child per
request), on fresh inputs (other seeds), with every timed call's output checked against the
reference (``reverify``: ``evaluator.timed_checks.TimedCalls.every``, one round per batch).  The
second verdict is the result, and its reason says it was re-verified.

The best baseline is the fastest of the eager time measured beside the candidate and the task's
torch.compile baseline (measured in a process of its own, with its own eager time), where known:
a candidate that slowed the eager reference in its own process is not let off by it.
"""
from __future__ import annotations

from dataclasses import replace

from evaluator.result import EvalResult, Status

FRESH_SEED_OFFSET = 104_729  # the re-verification's seeds: the configured ones moved by this prime


def best_baseline_ms(result: EvalResult, baseline: dict | None) -> float | None:
    """The fastest known time of the task's reference, eager or compiled, on the timed shape set."""
    times = [result.ref_runtime_ms, result.compiled_runtime_ms]
    if baseline:
        times += [baseline.get("eager_ms"), baseline.get("compiled_ms")]
    times = [t for t in times if t]
    return min(times) if times else None


def over_bound(result: EvalResult, baseline: dict | None, bound: float) -> float | None:
    """The result's speedup over the best baseline where it exceeds ``bound``, else None."""
    if result.status is not Status.CORRECT or not result.runtime_ms or result.extra.get("plausibility"):
        return None
    best = best_baseline_ms(result, baseline)
    if best is None:
        return None
    speedup = best / result.runtime_ms
    return speedup if speedup > bound else None


def reverify_request(seeds: list[int], timing: dict) -> dict:
    """The request's fields for a re-verification: fresh seeds, one round per batch, every output checked."""
    return {"reverify": True, "race": None, "seeds": [seed + FRESH_SEED_OFFSET for seed in seeds],
            "timing": dict(timing, batch=1)}


def reverified(first: EvalResult, second: EvalResult, speedup: float, bound: float) -> EvalResult:
    """The second evaluation's verdict, saying why it was made and what the first measured."""
    why = (f"{speedup:.1f}x over the best of eager and torch.compile, above evaluator.plausible_speedup="
           f"{bound:g}x: re-verified in a fresh process on fresh inputs with every timed call's output checked")
    record = {"speedup_over_best": round(speedup, 3), "bound": bound, "first_speedup": first.speedup,
              "first_runtime_ms": first.runtime_ms, "status": second.status.value}
    if second.status is not Status.CORRECT:
        return replace(second, reason=f"{why}; then: {second.reason}",
                       extra={**second.extra, "plausibility": record})
    return replace(second, reason=f"{second.reason}; {why}", extra={**second.extra, "plausibility": record})

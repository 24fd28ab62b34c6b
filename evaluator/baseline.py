"""The ``torch.compile`` baseline: how fast the compiler makes the reference.

Two ways to time it (``evaluator.compile_timing``):

- ``live``: every evaluation compiles the reference (inductor's cache in the
  worker's scratch directory is warm after the task's first candidate; the
  worker cannot import the compiler before forking, since importing inductor
  initialises CUDA) and times it interleaved with the candidate and the eager
  reference, call by call.
- ``cached``: the first candidate of a task that a worker times compiles the
  reference and times compiled against eager side by side; that ratio is
  cached in the worker's scratch directory, and later candidates chain it with
  their own side-by-side ratio to eager: ``compiled_ms = eager_ms(this run) *
  compiled/eager``.  Cheaper (no compile per evaluation), but not live.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from evaluator.calls import call
from evaluator.timing import time_side_by_side


def _key(task_source: str, shape: dict, device: str, backend: str, mode: str | None) -> str:
    text = json.dumps([task_source, shape, device, backend, mode], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compiled_reference(reference, inputs: list, *, backend: str, mode: str | None):
    """The reference compiled by ``torch.compile`` and called once (which compiles it)."""
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1  # no compile pool inside the sandboxed child
    compiled = torch.compile(reference, backend=backend, mode=mode)
    call(compiled, inputs, "torch.compile baseline")
    return compiled


def failure(exc: Exception) -> str:
    return f"torch.compile failed: {type(exc).__name__}: {str(exc)[:300]}"


def compiled_over_eager(problem, reference, inputs: list, *, task_source: str, shape: dict, device: str,
                        backend: str, mode: str | None, timing: dict, scratch: Path) -> dict:
    """``{"ratio": compiled_ms / eager_ms, ...}`` for this task and shape, or ``{"error": ...}``."""
    cache = scratch / "compile_baseline.json"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    key = _key(task_source, shape, device, backend, mode)
    if key in known:
        return known[key]
    try:
        compiled = compiled_reference(reference, inputs, backend=backend, mode=mode)
        pair = time_side_by_side(lambda: call(compiled, inputs, "torch.compile baseline"),
                                 lambda: call(reference, inputs, "reference timing"), device,
                                 warmup=timing["warmup"], reps=timing["reps"], budget_s=timing["budget_s"],
                                 warmup_s=timing.get("warmup_s", 0.0), batch=timing.get("batch", 8))
        entry = {"ratio": pair.candidate.median_ms / pair.baseline.median_ms, "backend": backend,
                 "compiled_ms": pair.candidate.median_ms, "eager_ms": pair.baseline.median_ms}
    except Exception as exc:  # a reference the compiler cannot handle has no compiled baseline
        entry = {"error": failure(exc)}
    known[key] = entry
    cache.write_text(json.dumps(known))
    return entry

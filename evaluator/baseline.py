"""The ``torch.compile`` baseline: how fast the compiler makes the reference.

Compiling takes seconds to minutes, so it is not repeated for every candidate.
The first candidate of a task that a worker times compiles the reference and
times compiled against eager side by side (interleaved, same inputs, same
timer); the ratio is cached in the worker's scratch directory.  Every
candidate is timed side by side with eager, so its speedup over the compiled
reference chains two ratios that were each measured side by side:
``compiled_ms = eager_ms(this run) * compiled/eager``.
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
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1  # no compile pool inside the sandboxed child
        compiled = torch.compile(reference, backend=backend, mode=mode)
        call(compiled, inputs, "torch.compile baseline")  # compiles
        pair = time_side_by_side(lambda: call(compiled, inputs, "torch.compile baseline"),
                                 lambda: call(reference, inputs, "reference timing"), device,
                                 warmup=timing["warmup"], reps=timing["reps"], budget_s=timing["budget_s"],
                                 warmup_s=timing.get("warmup_s", 0.0), batch=timing.get("batch", 8))
        entry = {"ratio": pair.candidate.median_ms / pair.baseline.median_ms, "backend": backend,
                 "compiled_ms": pair.candidate.median_ms, "eager_ms": pair.baseline.median_ms}
    except Exception as exc:  # a reference the compiler cannot handle has no compiled baseline
        entry = {"error": f"torch.compile failed: {type(exc).__name__}: {str(exc)[:300]}"}
    known[key] = entry
    cache.write_text(json.dumps(known))
    return entry

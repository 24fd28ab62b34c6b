"""GPU memory of an evaluation, against what the reference alone needs (runs in the sandbox).

The reference alone needs its parameters, one input set, its output and its
own workspace: :func:`reference_footprint` measures that peak on the largest
shape before the candidate is loaded.  An evaluation (checks, timing,
baselines) should stay within a few times that (``EvalResult.extra["memory"]``
records both), so a problem that fits the GPU for its reference fits it for
its evaluation.
"""
from __future__ import annotations

import torch

from evaluator.calls import call, make_inputs

MB = 1 << 20


def on_gpu(device: str) -> bool:
    return device.startswith("cuda") and torch.cuda.is_available()


def reference_footprint(problem, reference, shape: dict, seed: int, device: str) -> int | None:
    """Peak bytes allocated while the reference alone runs once on ``shape`` (its parameters
    included), from a clean slate; None off the GPU."""
    if not on_gpu(device):
        return None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    out = call(reference, make_inputs(problem, shape, seed, device), "reference")
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del out
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()  # from here on: the evaluation's own peak
    return peak


def phase_peak(device: str) -> int:
    """Peak bytes allocated since the last call (or :func:`reference_footprint`); starts the next phase."""
    if not on_gpu(device):
        return 0
    peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    return peak


def report(reference_bytes: int | None, device: str, checks_bytes: int, timing_bytes: int,
           fixed_timing_bytes: int) -> dict | None:
    """``{"peak_mb", "task_peak_mb", "reserved_mb", "reference_peak_mb", "ratio"}``.

    ``peak_mb`` is the evaluation's whole peak; ``task_peak_mb`` leaves out what timing holds whatever
    the task (``fixed_timing_bytes``: the L2 flush buffer), and ``ratio`` is that over the reference's
    own peak: what grows with the task's size.
    """
    if not on_gpu(device):
        return None
    task_peak = max(checks_bytes, timing_bytes - fixed_timing_bytes, reference_bytes or 0)
    out = {"peak_mb": round(max(checks_bytes, timing_bytes, reference_bytes or 0) / MB, 1),
           "task_peak_mb": round(task_peak / MB, 1), "fixed_timing_mb": round(fixed_timing_bytes / MB, 1),
           "reserved_mb": round(torch.cuda.max_memory_reserved() / MB, 1)}
    if reference_bytes:
        out.update(reference_peak_mb=round(reference_bytes / MB, 1), ratio=round(task_peak / reference_bytes, 3))
    return out




def device_total_mb(device: str) -> float | None:
    if not on_gpu(device):
        return None
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / MB

"""What an evaluation's rows keep of its result, and what a program read back gets of it."""
from __future__ import annotations

import json

# What an evaluation row keeps of its result's ``extra`` for the LLM's prompts: floors, bound, kernels.
PROFILE_FIELDS = ("roofline_bound", "floor_ms", "memory_floor_ms", "compute_floor_ms", "kernel_profile")


def profile_extra(row) -> dict:
    """``EvalResult.extra`` as far as an evaluation row keeps it: ``roofline`` (the floors and the bound)
    and ``kernel_profile`` (``evaluator.kernel_profile``), where measured."""
    extra = {}
    if row["floor_ms"] is not None:
        extra["roofline"] = {"floor_ms": row["floor_ms"], "bound": row["roofline_bound"],
                             "memory_ms": row["memory_floor_ms"], "compute_ms": row["compute_floor_ms"]}
    if row["kernel_profile"]:
        extra["kernel_profile"] = json.loads(row["kernel_profile"])
    return extra


def shape_timing_row(timing: dict, evaluation_id: int) -> dict:
    """A ``shape_timings`` row from one entry of ``EvalResult.extra["shape_timings"]``."""
    shape = ",".join(f"{k}={v}" for k, v in (timing.get("shape") or {}).items()) or "default"
    return dict(evaluation_id=evaluation_id, shape=shape[:512], numel=int(timing["numel"]),
                **{k: timing.get(k) for k in ("speedup", "speedup_noise", "runtime_ms", "ref_runtime_ms")})

"""What the host sends a sandbox worker: one typed request per evaluation, check, seed, baseline or
probe.  It travels as JSON (``as_message``); the worker's harness reads the same keys."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["evaluate", "check_task", "compile_seed", "compile_baseline", "roofline_peaks", "settle"]


@dataclass(frozen=True)
class WorkerRequest:
    kind: Kind
    task_name: str
    task_source: str
    device: Literal["cpu", "cuda"]
    seeds: list[int]
    cpu_max_numel: int
    timing: dict  # every TimingSettings field
    timed_checks: dict | None  # {"samples", "triton_share_min"}: the timed calls held to the checks' rules
    noise_floor: float
    roofline_limit: float
    roofline_peaks: dict | None
    memory_limit_mb: int
    gpu_memory_fraction: float
    isolate_network: bool
    containment: str
    compile_baseline: dict | None  # {"backend", "mode", "timing"}
    time_shapes: str
    tolerance: dict
    # what the kind adds: the candidate's source, a race, the peaks, ``exclusive``, a re-verification's inputs
    extra: dict = field(default_factory=dict)

    def as_message(self) -> dict:
        message = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        clash = set(message) & set(self.extra)
        if clash - {"roofline_peaks", "seeds", "timing"}:  # what a request may override for one call
            raise ValueError(f"a {self.kind} request cannot override {sorted(clash)}")
        return {**message, **self.extra}

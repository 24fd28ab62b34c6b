"""What an evaluation says about one candidate: a plain, serialisable record."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Status(str, enum.Enum):
    CORRECT = "correct"
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    REJECTED = "rejected"


@dataclass
class EvalResult:
    """Outcome of evaluating one candidate against its task's reference.

    ``speedup`` is reference time over candidate time, both medians measured
    side by side in the same process; ``timing_representative`` is false when
    the timings come from Triton's CPU interpreter.
    """

    status: Status
    reason: str = ""
    speedup: float | None = None
    runtime_ms: float | None = None
    ref_runtime_ms: float | None = None
    runtime_spread: float | None = None  # (p80 - p20) / median of the candidate's timings
    ref_runtime_spread: float | None = None  # the same for the reference
    speedup_noise: float | None = None  # relative uncertainty of ``speedup`` from repeated measurement
    compiled_runtime_ms: float | None = None  # torch.compile of the reference, timed alongside
    speedup_vs_compiled: float | None = None
    roofline_fraction: float | None = None  # achieved bytes/s or FLOP/s over the device's measured peak
    timing_representative: bool = False
    device: str = ""
    shapes_checked: int = 0
    # Compiled facts of the candidate's kernels (the maximum over them; GPU only).
    registers: int | None = None  # per thread
    spills: int | None = None
    shared_bytes: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    error: str = ""  # trimmed traceback or worker log, for feedback to operators
    wall_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT

    def to_dict(self) -> dict:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}  # shallow: all plain values
        data["status"] = self.status.value
        data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "EvalResult":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["status"] = Status(known["status"])
        return cls(**known)


def trim(text: str, limit: int = 4000) -> str:
    """Keep the end of a long traceback or log: that is where the cause is."""
    if len(text) <= limit:
        return text
    return "...[trimmed]...\n" + text[-limit:]

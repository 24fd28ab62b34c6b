"""The evaluator: scores one candidate kernel of one task, in a sandbox."""
from __future__ import annotations

from dataclasses import dataclass, field

from evaluator.result import EvalResult, Status, trim
from evaluator.sandbox import SandboxWorker


@dataclass(frozen=True)
class TimingSettings:
    warmup: int = 3
    warmup_s: float = 0.0  # and at least this long (GPU clocks ramp up after idling)
    reps: int = 50
    budget_s: float = 2.0  # stop repeating once this much time went into timing


@dataclass(frozen=True)
class EvaluatorSettings:
    """How candidates are checked and timed (``conf/evaluator/*.yaml``)."""

    device: str = "auto"  # auto | cpu | cuda
    seeds: tuple[int, ...] = (0, 1)
    timeout_s: float = 120.0
    cpu_max_numel: int = 1 << 16  # on the CPU, larger shape sets are skipped
    timing: TimingSettings = field(default_factory=lambda: TimingSettings(warmup_s=0.2))
    cpu_timing: TimingSettings = field(default_factory=lambda: TimingSettings(warmup=1, reps=3, budget_s=1.0))
    workers: int | None = None  # None: one per GPU, or one on the CPU
    cache_dir: str | None = None

    def __post_init__(self):
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"evaluator.device must be auto, cpu or cuda, not {self.device!r}")
        if not self.seeds:
            raise ValueError("evaluator.seeds needs at least one seed")
        if self.timeout_s <= 0:
            raise ValueError("evaluator.timeout_s must be positive")


class Evaluator:
    """Evaluates candidates one at a time in its own sandbox worker process."""

    def __init__(self, settings: EvaluatorSettings, device: str, cuda_index: int | None = None,
                 scratch_root: str | None = None):
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be resolved to cpu or cuda, not {device!r}")
        self.settings = settings
        self.device = device
        self.worker = SandboxWorker(device=device, cuda_index=cuda_index, scratch_root=scratch_root,
                                    cache_dir=settings.cache_dir)

    def _request(self, kind: str, task_name: str, task_source: str, **extra) -> dict:
        timing = self.settings.timing if self.device == "cuda" else self.settings.cpu_timing
        message = {
            "kind": kind, "task_name": task_name, "task_source": task_source,
            "device": "cuda" if self.device == "cuda" else "cpu",
            "seeds": list(self.settings.seeds), "cpu_max_numel": self.settings.cpu_max_numel,
            "timing": {"warmup": timing.warmup, "warmup_s": timing.warmup_s, "reps": timing.reps,
                       "budget_s": timing.budget_s},
            **extra,
        }
        return self.worker.request(message, self.settings.timeout_s)

    def evaluate(self, task_name: str, task_source: str, candidate_source: str) -> EvalResult:
        reply = self._request("evaluate", task_name, task_source, candidate_source=candidate_source)
        if "sandbox" in reply:
            status = Status.TIMEOUT if reply["sandbox"] == "timeout" else Status.CRASHED
            return EvalResult(status=status, reason=reply["reason"], error=trim(reply.get("log", "")))
        if "harness_error" in reply:
            return EvalResult(status=Status.CRASHED, reason=reply["harness_error"])
        return EvalResult.from_dict(reply)

    def check_task(self, task_name: str, task_source: str) -> dict:
        """Run the task's reference alone: ``{"ok": bool, "error"?, "warnings"?}``."""
        reply = self._request("check_task", task_name, task_source)
        if "sandbox" in reply or "harness_error" in reply:
            return {"ok": False, "error": reply.get("reason") or reply.get("harness_error"),
                    "traceback": reply.get("log", "")}
        return reply

    def close(self) -> None:
        self.worker.close()

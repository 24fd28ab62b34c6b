"""What a sandbox worker answers, read on the host into one typed reply per request kind.

The worker's harness writes JSON objects on its pipe (the wire format, as :class:`WorkerRequest`
travels the other way); :func:`read` is the one place the host reads them.  A request that got no
answer of its own (its process ran past its time or its host memory, died, the evaluator was
closed, or the harness raised outside the request's handling) is a :class:`WorkerFailure`, told by
its ``kind``; whether the GPU's memory ran out is the sandbox's verdict on the exception it caught
(``calls.is_out_of_memory``), carried as a flag, never read from a message's words.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Union

from evaluator.result import EvalResult, Status, trim

FailureKind = Literal["timeout", "memory", "crashed", "closed", "harness"]


@dataclass(frozen=True)
class WorkerFailure:
    """No answer of the request's own: ``timeout``, ``memory`` (the host memory limit), ``crashed``,
    ``closed`` (the evaluator closed before the request), ``harness`` (the harness raised)."""

    kind: FailureKind
    reason: str
    log: str = ""
    out_of_memory: bool = False  # the GPU's memory ran out (the harness's verdict on its exception)


@dataclass(frozen=True)
class TaskCheck:
    """The reference run alone on every admissible shape set (``check_task``)."""

    ok: bool
    stage: str = ""  # where it failed: load, reference, memory (the GPU's), host_memory, timeout, crashed, ...
    error: str = ""
    traceback: str = ""
    shapes: int = 0
    warnings: tuple[str, ...] = ()
    memory: dict = field(default_factory=dict)  # {"reference_peak_mb", "device_mb"} where measured

    @property
    def out_of_memory(self) -> bool:
        return self.stage == "memory"


@dataclass(frozen=True)
class DerivedSeed:
    """A seed kernel derived from inductor's Triton (``compile_seed``), or why none came."""

    ok: bool
    source: str | None = None
    error: str = ""
    traceback: str = ""
    stage: str = ""  # a WorkerFailure's kind, where the derivation got no answer
    out_of_memory: bool = False
    inductor_code: str | None = None  # what inductor generated, kept whether or not it became a seed
    graph_inputs: list | None = None
    configs: dict | None = None


@dataclass(frozen=True)
class CompileBaseline:
    """The task's torch.compile time over its eager time (``compile_baseline``), or why not measured."""

    ratio: float | None = None
    error: str = ""
    out_of_memory: bool = False
    detail: dict = field(default_factory=dict)  # the timings behind the ratio (medians, backend, mode)

    def entry(self) -> dict:
        """The baseline cache's entry for it: ``{"ratio"}`` or ``{"error"}``, as the run loop keeps it."""
        if self.ratio is not None:
            return {"ratio": self.ratio, **self.detail}
        return {"error": self.error or "the torch.compile baseline gave no ratio"}


@dataclass(frozen=True)
class MeasuredPeaks:
    """This GPU's peaks (``roofline_peaks``): ``peaks`` as evaluations are handed them, or an error."""

    peaks: dict | None = None  # {"bytes_per_s", "flops_per_s", "tf32_flops_per_s", "source"}
    error: str = ""


@dataclass(frozen=True)
class Settled:
    """The candidates' containment tried once on this worker (``settle``, the warm start)."""

    ok: bool
    error: str = ""
    tried_now: bool = False  # tried by this request (else the worker knew the outcome already)
    containment_off: dict = field(default_factory=dict)  # {"namespaces_off", "landlock_off"}: why not, if so


EvaluationReply = Union[EvalResult, WorkerFailure]

_WHAT = {"check_task": "the reference", "compile_seed": "deriving the seed",
         "compile_baseline": "the torch.compile baseline", "roofline_peaks": "measuring the GPU's peaks",
         "settle": "trying the candidates' containment"}


def failure_of(raw: dict) -> WorkerFailure | None:
    """The failure a raw reply tells, if it is one (the sandbox's or the harness's)."""
    if "sandbox" in raw:
        return WorkerFailure(kind=raw["sandbox"], reason=raw.get("reason", ""), log=raw.get("log", ""))
    if "harness_error" in raw:
        return WorkerFailure(kind="harness", reason=raw["harness_error"],
                             out_of_memory=bool(raw.get("out_of_memory")))
    return None


_TIMES = ("speedup", "runtime_ms", "ref_runtime_ms", "speedup_noise")


def malformed(raw: dict) -> str:
    """What is wrong with an evaluation's reply ("" where nothing is): the process that wrote it ran
    the candidate, which may have written it instead (a status no evaluation gives, a negative time
    whose speedup no re-check would question); the host then reports it, never fails on it."""
    if raw.get("status") not in {s.value for s in Status}:
        return f"status {str(raw.get('status'))[:40]!r}"
    for name in _TIMES:
        value = raw.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            return f"{name} {str(value)[:40]}"
    if raw["status"] == Status.CORRECT.value and raw.get("runtime_ms") == 0:
        return "a correct result timed at 0 ms"
    return ""


def read(kind: str, raw: dict, timeout_s: float):
    """The typed reply to a ``kind`` request from the worker's ``raw`` answer (``timeout_s``: the
    limit it ran under, named in a timeout's error)."""
    failure = failure_of(raw)
    if kind == "evaluate":
        if failure is None and (why := malformed(raw)):
            failure = WorkerFailure(kind="harness", reason=f"the evaluation answered a malformed result: {why}")
        return failure or EvalResult.from_dict(raw)
    if failure is not None:
        error = (f"{_WHAT[kind]} did not finish within evaluator.timeout_s={timeout_s:g} s"
                 if failure.kind == "timeout" else failure.reason)
        return _failed(kind, failure, error)
    if kind == "check_task":
        return TaskCheck(ok=bool(raw.get("ok")), stage=raw.get("stage", ""), error=str(raw.get("error", "")),
                         traceback=raw.get("traceback", ""), shapes=int(raw.get("shapes", 0)),
                         warnings=tuple(raw.get("warnings", ())), memory=dict(raw.get("memory") or {}))
    if kind == "compile_seed":
        return DerivedSeed(ok=bool(raw.get("ok")) and bool(raw.get("source")), source=raw.get("source"),
                           error=str(raw.get("error", "")), traceback=raw.get("traceback", ""),
                           out_of_memory=bool(raw.get("out_of_memory")), inductor_code=raw.get("inductor_code"),
                           graph_inputs=raw.get("graph_inputs"), configs=raw.get("configs"))
    if kind == "compile_baseline":
        detail = {k: v for k, v in raw.items() if k not in ("ratio", "error", "out_of_memory")}
        return CompileBaseline(ratio=raw.get("ratio"), error=str(raw.get("error", "")),
                               out_of_memory=bool(raw.get("out_of_memory")), detail=detail)
    if kind == "roofline_peaks":
        if "bytes_per_s" in raw:
            return MeasuredPeaks(peaks=dict(raw))
        return MeasuredPeaks(error=str(raw.get("error", "no peaks in the reply")))
    if kind == "settle":
        return Settled(ok=bool(raw.get("ok")), tried_now=bool(raw.get("tried_now")),
                       containment_off=dict(raw.get("containment_off") or {}))
    raise ValueError(f"no reply of kind {kind!r}")


def _failed(kind: str, failure: WorkerFailure, error: str):
    if kind == "check_task":
        # (the host memory limit: "host_memory", apart from the GPU's "memory" that a retry alone may cure)
        stage = "host_memory" if failure.kind == "memory" else failure.kind
        return TaskCheck(ok=False, stage=stage, error=error, traceback=failure.log)
    if kind == "compile_seed":
        return DerivedSeed(ok=False, stage=failure.kind, error=error, traceback=failure.log,
                           out_of_memory=failure.out_of_memory)
    if kind == "compile_baseline":
        return CompileBaseline(error=error, out_of_memory=failure.out_of_memory)
    if kind == "roofline_peaks":
        return MeasuredPeaks(error=error)
    if kind == "settle":
        return Settled(ok=False, error=error)
    raise ValueError(f"no reply of kind {kind!r}")


def result_of(reply: EvaluationReply, baseline: dict | None) -> EvalResult:
    """An evaluation's reply as a result, the task's cached torch.compile baseline applied."""
    if isinstance(reply, WorkerFailure):
        if reply.kind == "harness":
            return EvalResult(status=Status.CRASHED, reason=reply.reason)
        status = Status.TIMEOUT if reply.kind == "timeout" else Status.CRASHED
        return EvalResult(status=status, reason=reply.reason, error=trim(reply.log))
    apply_baseline(reply, baseline)
    return reply


def apply_baseline(result: EvalResult, entry: dict | None) -> None:
    """The cached torch.compile baseline chained with this evaluation's own eager time:
    ``compiled_ms = eager_ms(this run) * compiled/eager`` (``evaluator.baseline``)."""
    if entry is None or not result.ref_runtime_ms or not result.runtime_ms:
        return
    if "ratio" in entry:
        result.compiled_runtime_ms = entry["ratio"] * result.ref_runtime_ms
        result.speedup_vs_compiled = result.compiled_runtime_ms / result.runtime_ms
    else:
        result.extra["compile_baseline_error"] = entry["error"]


def out_of_memory(reply: EvaluationReply) -> bool:
    """Whether an evaluation failed because the GPU's memory ran out: the sandbox's verdict on the
    exception it caught (``calls.is_out_of_memory``), never words in a message a candidate could write."""
    if isinstance(reply, WorkerFailure):
        return reply.out_of_memory
    return reply.status != Status.CORRECT and bool(reply.extra.get("out_of_memory"))

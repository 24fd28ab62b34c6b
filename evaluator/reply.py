"""An evaluation's reply from its sandbox worker, read as a result (host side)."""
from __future__ import annotations

from evaluator.result import EvalResult, Status, trim


def result_of(reply: dict, baseline: dict | None) -> EvalResult:
    """An evaluation's reply as a result, the task's cached torch.compile baseline applied."""
    if "sandbox" in reply:
        status = Status.TIMEOUT if reply["sandbox"] == "timeout" else Status.CRASHED
        return EvalResult(status=status, reason=reply["reason"], error=trim(reply.get("log", "")))
    if "harness_error" in reply:
        return EvalResult(status=Status.CRASHED, reason=reply["harness_error"])
    result = EvalResult.from_dict(reply)
    apply_baseline(result, baseline)
    return result


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


def out_of_memory(reply: dict) -> bool:
    """Whether an evaluation failed because the GPU's memory ran out: the sandbox's verdict on the
    exception it caught (``calls.is_out_of_memory``), never words in a message a candidate could write."""
    if reply.get("status") == "correct":
        return False
    return bool(reply.get("out_of_memory") or (reply.get("extra") or {}).get("out_of_memory"))

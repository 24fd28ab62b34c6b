"""The worker's answers read on the host into typed replies (evaluator.replies)."""
import pytest

from evaluator import DerivedSeed, EvalResult, Status, TaskCheck, WorkerFailure
from evaluator.replies import CompileBaseline, MeasuredPeaks, Settled, out_of_memory, read, result_of


def test_each_kind_is_read_into_its_own_type():
    check = read("check_task", {"ok": True, "shapes": 2, "warnings": ["w"], "memory": {"device_mb": 80.0}}, 60)
    assert check == TaskCheck(ok=True, shapes=2, warnings=("w",), memory={"device_mb": 80.0})
    seed = read("compile_seed", {"ok": True, "source": "S", "inductor_code": "I", "configs": {"k": 1}}, 60)
    assert isinstance(seed, DerivedSeed) and seed.ok and seed.source == "S" and seed.configs == {"k": 1}
    baseline = read("compile_baseline", {"ratio": 0.5, "compiled_ms": 1.0, "eager_ms": 2.0}, 60)
    assert baseline == CompileBaseline(ratio=0.5, detail={"compiled_ms": 1.0, "eager_ms": 2.0})
    assert baseline.entry() == {"ratio": 0.5, "compiled_ms": 1.0, "eager_ms": 2.0}
    peaks = read("roofline_peaks", {"bytes_per_s": 3e12, "flops_per_s": 1e15, "tf32_flops_per_s": 4e14,
                                    "source": "measured"}, 60)
    assert isinstance(peaks, MeasuredPeaks) and peaks.peaks["bytes_per_s"] == 3e12
    settled = read("settle", {"ok": True, "tried_now": True, "containment_off": {"landlock_off": "old kernel"}}, 60)
    assert settled == Settled(ok=True, tried_now=True, containment_off={"landlock_off": "old kernel"})
    result = read("evaluate", {"status": "correct", "reason": "passed", "speedup": 1.5}, 60)
    assert isinstance(result, EvalResult) and result.correct and result.speedup == 1.5
    with pytest.raises(ValueError, match="no reply of kind"):
        read("unknown", {}, 60)


def test_an_answer_that_is_a_failure_is_told_by_its_kind_for_every_request():
    timeout = {"sandbox": "timeout", "reason": "no result within 60 s; killed", "log": "tail"}
    check = read("check_task", timeout, 60)
    assert not check.ok and check.stage == "timeout" and check.traceback == "tail"
    assert check.error == "the reference did not finish within evaluator.timeout_s=60 s"
    seed = read("compile_seed", {"sandbox": "crashed", "reason": "the process died"}, 60)
    assert not seed.ok and seed.stage == "crashed" and seed.error == "the process died"
    baseline = read("compile_baseline", {"harness_error": "RuntimeError: x", "out_of_memory": True}, 60)
    assert baseline.ratio is None and baseline.out_of_memory and baseline.entry() == {"error": "RuntimeError: x"}
    assert read("roofline_peaks", {"sandbox": "closed", "reason": "closed"}, 60).peaks is None
    assert read("settle", timeout, 60).ok is False
    evaluation = read("evaluate", timeout, 60)
    assert evaluation == WorkerFailure(kind="timeout", reason="no result within 60 s; killed", log="tail")
    assert result_of(evaluation, None).status is Status.TIMEOUT


def test_the_host_memory_limit_is_not_taken_for_the_gpus_memory():
    """A reference over the host memory limit is not prepared again alone (that cures only the GPU's)."""
    host = read("check_task", {"sandbox": "memory", "reason": "used 9000 MiB of host memory"}, 60)
    assert host.stage == "host_memory" and not host.out_of_memory
    gpu = read("check_task", {"ok": False, "stage": "memory", "error": "ran out of GPU memory"}, 60)
    assert gpu.out_of_memory
    assert not out_of_memory(read("evaluate", {"sandbox": "memory", "reason": "host"}, 60))


def test_a_seed_reply_without_source_is_not_a_seed():
    assert not read("compile_seed", {"ok": True}, 60).ok

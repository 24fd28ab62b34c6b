"""On a CUDA GPU: what is timed is the candidate's own kernels on the caller's stream; each check
catches its cheat and lets honest kernels through (cheats in tests/support/integrity_cheats.py)."""
import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from tests.support.integrity_cheats import (CAST_GLUE_DOES_THE_WORK, CAST_HONEST, CAST_TASK, gelu_cheats,
                                            gelu_watched_cheats, row_sum_cheat, watched_verdicts)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_evaluator():
    evaluator = Evaluator(EvaluatorSettings(device="cuda", timeout_s=300), "cuda", 0)
    yield evaluator
    evaluator.close()


def test_honest_kernels_pass_with_their_share_of_device_time(gpu_evaluator, builtin_tasks):
    for name, source, task_source in [("cast", CAST_HONEST, CAST_TASK),
                                      ("gelu", builtin_tasks["gelu"].seeds[0], builtin_tasks["gelu"].source)]:
        result = gpu_evaluator.evaluate(name, task_source, source)
        assert result.status is Status.CORRECT, (name, result.reason, result.error)
        verified = result.extra["timed_checks"]
        assert verified["triton_share"] >= 0.9 and verified["stream_checked"], verified
        assert verified["input_sets"] == 3 and verified["outputs_checked"] == 3
        assert verified["fresh_inputs"] is True, verified.get("fresh_inputs_off")
        assert verified["audited_call_ms"] > 0 and len(verified["fresh_host_ms"]) == 2, verified


def test_a_kernel_on_a_side_stream_is_rejected(gpu_evaluator, builtin_tasks):
    task = builtin_tasks["gelu"]
    result = gpu_evaluator.evaluate(task.name, task.source, gelu_cheats(task.seeds[0])["side_stream"][0])
    # Caught by whichever comes first: a kept output copied on the caller's stream before the side
    # stream's work ended is wrong, or the audited batch sees the kernel on another stream.
    assert (result.status is Status.REJECTED and "another CUDA stream" in result.reason) or (
        result.status is Status.INCORRECT and "drawn for checking after it returned" in result.reason), result.reason


def test_glue_doing_the_work_beside_a_useless_launch_is_rejected_by_its_device_share(gpu_evaluator):
    result = gpu_evaluator.evaluate("cast", CAST_TASK, CAST_GLUE_DOES_THE_WORK)
    assert result.status is Status.REJECTED and "of the device time" in result.reason, result.reason


def test_a_useless_launch_beside_a_pytorch_reduction_is_rejected(gpu_evaluator, builtin_tasks):
    task = builtin_tasks["row_sum"]
    result = gpu_evaluator.evaluate(task.name, task.source, row_sum_cheat(task.seeds[0]))
    assert result.status is Status.REJECTED and "PyTorch's sum" in result.reason, result.reason


@pytest.mark.parametrize("name, status, reason", [
    ("pytorch_after_n_calls", Status.REJECTED, "timed call"),
    # every other round the reference runs just before it on the same values: its freed output, poisoned
    # after its window (evaluator/spent_outputs.py), holds NaN where it held the answer
    ("unwritten_after_checks", Status.INCORRECT, "timed call"),
    ("failed_launch_fallback", Status.REJECTED, "launches all failed"),
    # the output it returns again is still held (in its globals): refused at the first such call, as
    # on the CPU (tests/test_integrity.py), before the comparisons that caught it before stop 57
    ("cache_by_shape_after_checks", Status.REJECTED, "earlier call's output"),
    # stands for a candidate that does less (PyTorch's work, a cheaper path) whenever it is not watched
    ("more_work_when_watched", Status.REJECTED, "whether or not a dispatch mode or the profiler is on"),
    ("thrice_the_work_when_watched", Status.REJECTED, "whether or not a dispatch mode or the profiler is on"),
])
def test_cheats_on_the_timed_calls_are_caught(gpu_evaluator, builtin_tasks, name, status, reason):
    task = builtin_tasks["gelu"]
    result = gpu_evaluator.evaluate(task.name, task.source, gelu_cheats(task.seeds[0])[name][0])
    assert result.status is status and reason in result.reason, result.reason


def test_an_output_cached_by_identity_gains_nothing(gpu_evaluator, builtin_tasks):
    task = builtin_tasks["gelu"]
    honest = gpu_evaluator.evaluate(task.name, task.source, task.seeds[0])
    cached = gpu_evaluator.evaluate(task.name, task.source, gelu_cheats(task.seeds[0])["cache_by_identity"][0])
    assert cached.status is Status.CORRECT, cached.reason  # correct: it recomputes every call
    assert cached.speedup < honest.speedup * 1.15, (cached.speedup, honest.speedup)


# Round three: the same cheats and verdicts as on the CPU (tests/test_integrity_watched.py).
WATCHED_EXPECTED = watched_verdicts("torch.nn.functional:gelu")


@pytest.mark.parametrize("name", sorted(WATCHED_EXPECTED))
def test_watched_and_reference_cheats_are_caught(gpu_evaluator, builtin_tasks, name):
    task = builtin_tasks["gelu"]
    status, reason = WATCHED_EXPECTED[name]
    result = gpu_evaluator.evaluate(task.name, task.source, gelu_watched_cheats(task.seeds[0])[name][0])
    assert result.status is status and reason in result.reason, (name, result.status, result.reason, result.error)


def test_an_honest_kernel_counts_its_launches_and_its_kept_outputs(gpu_evaluator, builtin_tasks):
    task = builtin_tasks["gelu"]
    result = gpu_evaluator.evaluate(task.name, task.source, task.seeds[0])
    assert result.status is Status.CORRECT, (result.reason, result.error)
    verified = result.extra["timed_checks"]
    assert verified["launches"] == [1, 1] and len(verified["kept_checked"]) >= 1
    assert verified["triton_share"] >= 0.9 and verified["stream_checked"], verified

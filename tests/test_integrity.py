"""What is timed is what was checked (CPU, Triton's interpreter): each check has a cheating
candidate it catches and an honest kernel it lets through."""
import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evaluator.calls import Failure
from tests.support.candidates import TASK, candidate


@pytest.fixture(scope="module")
def evaluator():
    ev = Evaluator(EvaluatorSettings(device="cpu", timeout_s=60), "cpu")
    yield ev
    ev.close()


BROKEN_KERNEL = '''
@triton.jit
def broken_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.no_such_function(tl.load(x_ptr + offs)))
'''


@pytest.mark.slow
def test_a_launch_that_fails_inside_try_except_is_not_counted(evaluator):
    """Its launch fails to compile; it catches that and computes with PyTorch."""
    fallback = candidate().replace("class ModelNew", BROKEN_KERNEL + "\n\nclass ModelNew").replace(
        "        double_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)\n",
        "        try:\n            broken_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)\n"
        "        except Exception:\n            out = x * 2.0\n")
    result = evaluator.evaluate("double", TASK, fallback)
    assert result.status is Status.REJECTED, result.reason
    assert "launches all failed" in result.reason


def test_a_launch_that_fails_then_succeeds_counts_the_one_that_ran(evaluator):
    """A first attempt that fails and a working kernel after it: honest, the working launch counts."""
    retry = candidate().replace("class ModelNew", BROKEN_KERNEL + "\n\nclass ModelNew").replace(
        "        double_kernel[", "        try:\n            broken_kernel[(1,)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)\n"
        "        except Exception:\n            pass\n        double_kernel[")
    result = evaluator.evaluate("double", TASK, retry)
    assert result.status is Status.CORRECT, result.reason


@pytest.mark.slow
def test_a_reduction_no_deny_list_named_is_not_glue(evaluator, builtin_tasks):
    """A real but useless launch (it fills a scratch buffer) while torch.sum does the work."""
    task = builtin_tasks["row_sum"]
    seed = task.seeds[0]
    cheat = seed.replace("        return out", "        return torch.sum(x, dim=-1)")
    assert cheat != seed
    result = evaluator.evaluate(task.name, task.source, cheat)
    assert result.status is Status.REJECTED and "PyTorch's sum" in result.reason, result.reason
    honest = evaluator.evaluate(task.name, task.source, seed)
    assert honest.status is Status.CORRECT, honest.reason


def counting(after: int, then: str) -> str:
    """The honest kernel for its first ``after`` calls (the checks make 16), ``then`` after them."""
    return candidate("global CALLS\n        CALLS = globals().get('CALLS', 0) + 1\n"
                     f"        if CALLS > {after}:\n            {then}")


def test_pytorch_after_the_checks_is_caught_on_the_first_timed_call(evaluator):
    result = evaluator.evaluate("double", TASK, counting(16, "return x * 2.0"))
    assert result.status is Status.REJECTED, result.reason
    assert result.reason.startswith("timed calls 1, ") and "launched no Triton kernel" in result.reason


def test_pytorch_after_the_last_timed_call_is_caught_by_the_call_after_it(evaluator):
    """16 checked calls and 4 timed ones (warm-up 1, reps 3 on the CPU): only the 21st is PyTorch's."""
    result = evaluator.evaluate("double", TASK, counting(20, "return x * 2.0"))
    assert result.status is Status.REJECTED and "launched no Triton kernel" in result.reason, result.reason


def test_an_output_remembered_by_shape_is_wrong_on_the_timed_input_sets(evaluator):
    """Once the checks are over, it recomputes one call in four and otherwise returns its last output
    (after a useless launch on a scratch buffer, so that every call launches a kernel of its own)."""
    cheat = counting(16, "if CALLS % 4 and 'LAST' in globals() and LAST.shape == x.shape:\n"
                         "                double_kernel[(1,)](x, torch.empty(1), 1, BLOCK_SIZE=BLOCK_SIZE)\n"
                         "                return LAST")
    cheat = cheat.replace("global CALLS", "global CALLS, LAST").replace("        return out", "        LAST = out\n        return out")
    result = evaluator.evaluate("double", TASK, cheat)
    # the output it returns again is still held: refused before any comparison, which would miss it
    assert result.status is Status.REJECTED and "earlier call's output" in result.reason, result.reason
    # one that copies its last output into a new one is wrong on the timed input sets
    copied = cheat.replace("                return LAST", "                return LAST.clone()")
    result = evaluator.evaluate("double", TASK, copied)
    assert result.status is Status.INCORRECT and "timed calls, input set" in result.reason, result.reason


def test_an_honest_kernel_is_verified_on_its_timed_calls(evaluator):
    result = evaluator.evaluate("double", TASK, candidate())
    assert result.status is Status.CORRECT, result.reason
    verified = result.extra["timed_checks"]
    assert verified["input_sets"] == 3 and verified["outputs_checked"] == 3
    assert len(verified["kept_checked"]) == 3 and verified["launches"] == [1, 1]  # every call launched one kernel
    assert verified["audited_calls"] >= 3 and verified["calls"] >= 4 + 3 + 3  # timed, checked after, audited
    assert "triton_share" not in verified and "audited_call_ms" not in verified  # profiled on a GPU only
    assert verified["fresh_inputs"] is True, verified.get("fresh_inputs_off")  # each timed call's values drawn afresh
    assert "fresh_inputs_off" not in verified and verified["fresh_host_ms"][1] >= verified["fresh_host_ms"][0]


def test_timed_input_sets_fall_back_to_two_beyond_their_memory_budget():
    import torch

    from evaluator.timed_checks import input_sets

    class Problem:
        @staticmethod
        def get_inputs(n):
            return [torch.randn(n)]

    first = Problem.get_inputs(1 << 18)  # 1 MB
    timing = {"input_sets": 3, "input_sets_mb": 4}
    sets = input_sets(Problem, {"n": 1 << 18}, 0, "cpu", timing, first)
    assert len(sets) == 3 and len({s[0].data_ptr() for s in sets}) == 3
    assert not torch.equal(sets[0][0], sets[1][0])
    assert len(input_sets(Problem, {"n": 1 << 18}, 0, "cpu", dict(timing, input_sets_mb=1), first)) == 2


def test_timed_calls_far_faster_than_the_audited_ones_are_rejected():
    from evaluator.timed_checks import UNWATCHED_MIN, as_busy_unwatched

    # Honest: a timed window spans its kernels and more, and the audited calls run warm.
    as_busy_unwatched(1.10, {"audited_call_ms": 1.0})
    as_busy_unwatched(0.90, {"audited_call_ms": 1.0})  # a faster clock while timing: within the margin
    as_busy_unwatched(0.01, None)  # no audit (the CPU): nothing to hold it to
    as_busy_unwatched(0.01, {"triton_share": 1.0})
    # Eight launches while a dispatch mode or the profiler is on, one otherwise.
    with pytest.raises(Failure) as caught:
        as_busy_unwatched(1.0, {"audited_call_ms": 8.0})
    assert caught.value.status is Status.REJECTED and "whether or not" in caught.value.reason
    assert f"at least {UNWATCHED_MIN:.2f} needed" in caught.value.reason
    # Three launches watched, one otherwise: no more than 2x gained unseen.
    with pytest.raises(Failure):
        as_busy_unwatched(1.0, {"audited_call_ms": 3.0})


def test_the_device_share_counts_the_candidates_kernels_on_the_callers_stream_only():
    from evaluator.timed_checks import device_share

    honest = device_share([("softmax_kernel", 7, 90.0), ("Memset (Device)", 7, 2.0)], {"softmax_kernel"}, 7)
    assert honest.share == pytest.approx(90 / 92) and not honest.elsewhere
    # A useless launch of its own while PyTorch's kernel does the work.
    scratch = device_share([("fill_kernel", 7, 1.0), ("void at::native::reduce_kernel<...>", 7, 99.0)],
                           {"fill_kernel"}, 7)
    assert scratch.share == pytest.approx(0.01) and "reduce_kernel" in scratch.top_others()
    # Its own kernel, on a stream the caller never waits for.
    side = device_share([("softmax_kernel", 13, 90.0)], {"softmax_kernel"}, 7)
    assert side.share == 0.0 and side.elsewhere == {"softmax_kernel"}

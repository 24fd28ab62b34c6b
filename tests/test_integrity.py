"""What is timed is what was checked (CPU, Triton's interpreter): each check has a cheating
candidate it catches and an honest kernel it lets through."""
import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from tests.test_evaluator import TASK, candidate


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

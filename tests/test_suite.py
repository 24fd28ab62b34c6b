"""Every built-in seed kernel is correct against its reference (CPU interpreter)."""
import pytest

from evaluator import Status

NAMES = ["softmax", "layernorm", "rmsnorm", "gelu", "bias_gelu", "row_sum", "cross_entropy", "matmul_fp16"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_seed_is_correct(cpu_evaluator, builtin_tasks, name):
    task = builtin_tasks[name]
    check = cpu_evaluator.check_task(task.name, task.source)
    assert check.ok and not check.warnings, check
    result = cpu_evaluator.evaluate(task.name, task.source, task.seeds[0])
    assert result.status is Status.CORRECT, (result.reason, result.error)
    assert result.shapes_checked >= 3  # the small, awkward shapes


@pytest.mark.parametrize("name", ["softmax", "layernorm", "row_sum"])
def test_a_slightly_wrong_kernel_is_caught(cpu_evaluator, builtin_tasks, name):
    task = builtin_tasks[name]
    # One element wrong, written with glue (a fill) that the guards let through.
    wrong = task.seeds[0].replace("        return out", "        out.view(-1)[:1].fill_(0.5)\n        return out")
    assert wrong != task.seeds[0]
    result = cpu_evaluator.evaluate(task.name, task.source, wrong)
    assert result.status is Status.INCORRECT, result.reason

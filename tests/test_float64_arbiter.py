"""A candidate that misses the reference where the reference misses its own float64 answer is judged
against that answer, and kept only if at least as accurate as the reference (evaluator.float64_arbiter).

KernelBench's level2/14 sums each row of an fp32 product; the sum cancels, and on an H200 cuBLAS's
own fp32 sums were beyond the strict tolerance of the float64 answer at 19 of 1024 rows, where
split-precision dots were at 2: they missed the reference by the reference's own error.  Here a
row sum that cancels stands in for it."""
import torch

from evaluator import Status
from evaluator.float64_arbiter import at_least_as_accurate, float64_output, within_rounding_reach

# sum(x + c) - c n is the row's sum; in fp32 each x + c rounds by up to 4.9e-4 at c = 1e4, and the
# sum of 1024 of them near 1e7 by units: about 1 off on rows that sum to about 512 (tolerance 0.05),
# where the first row's sum of about 5e4 puts an error of 1 at 2e-5 of the output's scale.  c is an
# input, so the adversarial checks scale it with x.
TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, c):
        return (x + c).sum(dim=1) - c.squeeze(1) * x.shape[1]

def get_inputs():
    x = torch.rand(16, 1024)
    x[0] *= 100.0
    return [x, torch.full((16, 1), 1.0e4)]

def get_init_inputs():
    return []
'''

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def row_sum(x_ptr, out_ptr, N: tl.constexpr):  # the sum of x + c less c n, c cancelled by hand
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * N + tl.arange(0, N))
    tl.store(out_ptr + row, tl.sum(x, axis=0) + OFF)

class ModelNew(nn.Module):
    def forward(self, x, c):
        out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        row_sum[(x.shape[0],)](x, out, N=x.shape[1])
        return out
'''


def _task_reference():
    namespace = {}
    exec(TASK, namespace)
    torch.manual_seed(0)
    return namespace["Model"](), namespace["get_inputs"]()


def test_the_reference_itself_misses_its_float64_answer_by_its_rounding():
    model, inputs = _task_reference()
    exact = float64_output(model, inputs, "cpu")
    assert exact.dtype is torch.float64 and torch.allclose(exact, inputs[0].double().sum(1), rtol=1e-12)
    error = (model(*inputs).double() - exact).abs()
    assert (error > 1e-4 + 1e-4 * exact.abs()).sum() >= 8 and error.max() < 3.45e-4 * exact.abs().max()


def test_a_kernel_more_exact_than_the_reference_passes_and_says_why(cpu_evaluator):
    result = cpu_evaluator.evaluate("cancelling", TASK, KERNEL.replace("OFF", "0.0"))
    assert result.status is Status.CORRECT, result.reason
    judged = result.extra["judged_by_float64"]
    assert judged[0].startswith("smoke test: judged against float64, where the reference's own output is")
    assert "judged against float64, where the reference itself misses it" in result.reason


def test_a_kernel_less_exact_than_the_reference_fails(cpu_evaluator):
    # exact but for 10 on every row: further from the float64 answer than the reference's rounding
    result = cpu_evaluator.evaluate("cancelling", TASK, KERNEL.replace("OFF", "10.0"))
    assert result.status is Status.INCORRECT
    assert "elements beyond atol=0.0001, rtol=0.0001" in result.reason, result.reason


def test_a_reference_within_the_tolerance_of_its_answer_keeps_the_check():
    exact = [torch.tensor([1000.0, 2.0], dtype=torch.float64)]
    expected = torch.tensor([1000.0, 2.0])
    assert at_least_as_accurate(exact, expected, torch.tensor([1000.0, 2.001]), None, None) is None
    # the reference 0.01 off at one element (0.0099 beyond the tolerance): a candidate at most as far
    # beyond it, at no more elements, passes, whichever they are (rounding errs where it will: on
    # level2/14 the split-precision dots missed other rows than cuBLAS's)
    off = torch.tensor([1000.0, 2.01])
    assert "1 elements beyond the tolerance" in at_least_as_accurate(exact, off, torch.tensor([1000.0, 2.005]),
                                                                     None, None)
    assert at_least_as_accurate(exact, off, torch.tensor([1000.105, 2.0]), None, None)  # 0.0049 beyond
    assert at_least_as_accurate(exact, off, torch.tensor([1000.105, 2.005]), None, None) is None  # more elements
    assert at_least_as_accurate(exact, off, torch.tensor([1000.0, 2.02]), None, None) is None  # further
    assert at_least_as_accurate(exact, off, torch.tensor([1000.0, float("nan")]), None, None) is None
    assert at_least_as_accurate(exact, off, torch.tensor([1000.0, 2.0, 3.0]), None, None) is None  # shape


def test_no_float64_answer_where_the_reference_computes_in_another_precision():
    class Narrowing(torch.nn.Module):
        def forward(self, x):
            return x.float() * 2.0

    class Failing(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("no float64 kernel")

    assert float64_output(Narrowing(), [torch.ones(3)], "cpu") is None
    assert float64_output(Failing(), [torch.ones(3)], "cpu") is None


def test_a_reference_further_from_its_answer_than_rounding_goes_judges_nothing():
    # each x + 1e8 rounds to 1e8 in fp32: the reference is hundreds off rows that sum to about 512,
    # as a random draw or a decision on a tie would be; the float64 answer cannot judge there
    x = torch.rand(4, 1024, generator=torch.Generator().manual_seed(0))
    reference = (x + 1.0e8).sum(dim=1) - 1.0e8 * x.shape[1]
    exact = [x.double().sum(1)]
    assert at_least_as_accurate(exact, reference, x.sum(1), None, None) is None
    model, inputs = _task_reference()  # rounding-level: the exact sum is judged, and passes
    assert at_least_as_accurate([inputs[0].double().sum(1)], model(*inputs), inputs[0].sum(1), None, None)


def test_a_kernel_that_is_simply_wrong_or_a_reference_too_large_costs_no_float64_run(monkeypatch):
    from evaluator import float64_arbiter

    expected = torch.tensor([1000.0, 2.0])
    assert within_rounding_reach(expected, torch.tensor([1000.3, 2.3]), None, None)  # 3.5e-4 x 1000, twice
    assert not within_rounding_reach(expected, torch.tensor([1000.0, 3.0]), None, None)
    assert not within_rounding_reach(expected, torch.tensor([1000.0, float("nan")]), None, None)
    model, inputs = _task_reference()
    assert float64_output(model, inputs, "cpu") is not None
    monkeypatch.setattr(float64_arbiter, "MOST_FLOAT64_BYTES", 8 * inputs[0].numel())
    assert float64_output(model, inputs, "cpu") is None  # x and c in float64: over the bound


# A product of two halves of each row: on the mixed scales of the adversarial checks (a factor of 1e3
# or 1e-3 on each value) one half's fp32 product underflows to 0 and the other's overflows to Inf on a
# few of the 64 rows, NaN where the float64 answer is finite (level1/90's cumprod, in small).
PRODUCT_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        n = x.shape[1] // 2
        return x[:, :n].prod(1) * x[:, n:].prod(1)

def get_inputs():
    return [torch.rand(64, 512) * 2.718281828]

def get_init_inputs():
    return []
'''

PRODUCT_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def row_product(x_ptr, out_ptr, N: tl.constexpr):  # in float64, as the exponential of a sum of logs
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * N + tl.arange(0, N)).to(tl.float64)
    tl.store(out_ptr + row, tl.exp(tl.sum(tl.log(x), axis=0)))

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        row_product[(x.shape[0],)](x, out, N=x.shape[1])
        return out
'''


def test_a_kernel_without_the_references_overflow_is_judged_by_the_float64_answer(cpu_evaluator):
    result = cpu_evaluator.evaluate("halves", PRODUCT_TASK, PRODUCT_KERNEL)
    assert result.status is Status.CORRECT, result.reason
    judged = " ".join(result.extra["judged_by_float64"])
    assert "mixed scales: judged against float64, where the reference's own output has NaN or Inf" in judged


def test_nan_or_inf_apart_from_the_answers_are_counted_against_the_references():
    exact = [torch.tensor([0.5, 1e-10, 2.0, 3.0], dtype=torch.float64)]
    reference = torch.tensor([0.5, float("nan"), float("inf"), 3.0])
    assert "at 2 elements" in at_least_as_accurate(exact, reference, exact[0].float(), None, None)
    assert at_least_as_accurate(exact, reference, reference.clone(), None, None)  # no worse than the reference
    nan_more = torch.tensor([float("nan"), float("nan"), float("inf"), 3.0])
    assert at_least_as_accurate(exact, reference, nan_more, None, None) is None
    finite_off = torch.tensor([0.6, 1e-10, 2.0, 3.0])  # one miss fewer, but off where the reference is exact
    assert at_least_as_accurate(exact, reference, finite_off, None, None) is None
    assert at_least_as_accurate(exact, reference, torch.zeros(3), None, None) is None  # shape
    exact_nan = [torch.tensor([0.5, float("nan"), float("inf"), 3.0], dtype=torch.float64)]
    assert at_least_as_accurate(exact_nan, reference, nan_more, None, None) is None  # the reference is right

"""The reference run again in float64, to judge a candidate the reference itself cannot (runs in the
sandbox).

A check compares the candidate with the reference's output, which is itself rounded.  Mostly that
rounding is far inside the tolerance.  Where the output sums terms that cancel, it is not: level2/14
of KernelBench sums each row of a 1024 x 8192 x 8192 fp32 product, and on one H200 cuBLAS's own
fp32 row sums were beyond the strict tolerance (1e-4) of the float64 answer at 19 of 1024 rows, up
to 0.025 off.  A candidate that rounds differently, or less (tf32x3 split-precision dots: 2 rows,
0.005), then misses the reference by the reference's own error
(``experiments/data/dot_precision_probe_h200_s53.json``).

So where a candidate misses, the reference is run again on the same inputs with its parameters and
inputs in float64.  Only where the reference itself misses that float64 answer (elements beyond the
tolerance) is the candidate judged against it instead, and kept only if it is at least as accurate
as the reference by both measures: no more elements beyond the tolerance, and no larger excess over
it.  A reference within the tolerance of its float64 answer leaves the check as it was; so does one
that cannot run in float64 (an operator without it, a tensor it makes in fp32, memory), and one
further from it than rounding goes (``_rounding_bound``: a random draw, a decision on a tie).  The
candidate never sees the float64 run: it is made by the harness, after the candidate's call.

The same holds for the range: a product overflows or underflows in an order of its own.  On one
H200, KernelBench's level1/90 (cumprod of 32768 x 32768 values) on the check's mixed scales gave
12.1 million NaN and 13.8 million Inf from PyTorch's own CUDA scan, where its float64 run has no NaN
and 21,624 Inf; a CPU scan differs again, and inductor's scan gives 697 million NaN
(``experiments/kernelbench_search.md``, section 29).  So where the reference has NaN or Inf that
its float64 answer lacks (or the reverse), a candidate that misses it is judged against the answer
by elements: those whose NaN or Inf differs plus those beyond the tolerance, no more than the
reference's, and no larger excess where both are finite.
"""
from __future__ import annotations

import copy

import torch

from evaluator.calls import Failure, call, synchronize
from evaluator.compare import beyond_tolerance, chunks, finite_abs_max, flatten, mismatch, tolerance_of


# The float64 copies of the reference's parameters and inputs it may make: KernelBench's largest
# level-1 inputs reach 7.5 GB, twice that in float64, beside the evaluation's own footprint.
MOST_FLOAT64_BYTES = 4 << 30
# More where a GPU has room for them three times over (inputs, output, the check's temporaries).
FREE_MEMORY_SHARE = 3


def within_rounding_reach(expected, output, atol, rtol) -> bool:
    """Whether ``output`` is near enough ``expected`` that the float64 answer could judge it (see
    ``_rounding_bound``: the reference and the candidate each within it of the answer); a kernel
    that is simply wrong costs no float64 run."""
    distance = beyond_tolerance(expected, output, atol, rtol)
    return distance is not None and distance[2] <= 2.0 * _rounding_bound(expected, expected, floor=1.0)


def float64_output(reference: torch.nn.Module, inputs: list, device: str):
    """``reference``'s output on ``inputs`` with its parameters, buffers and floating inputs in float64
    (a copy of it: the reference itself is left as it was); None where it cannot be had."""
    floating = [t for t in [*reference.parameters(), *reference.buffers(), *inputs]
                if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not _room_for(sum(t.numel() for t in floating) * 8, device):
        return None
    try:
        wide = copy.deepcopy(reference).double()
        widened = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
        output = call(wide, widened, "reference in float64")
        synchronize(device)
    except (Failure, RuntimeError, TypeError, copy.Error):  # no float64 path: judged as before
        return None
    if any(isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
           for t in flatten(output)):
        return None  # it computed in another precision somewhere: no better answer than the reference's
    return output


def _room_for(nbytes: int, device: str) -> bool:
    if nbytes <= MOST_FLOAT64_BYTES:
        return True
    if not (device.startswith("cuda") and torch.cuda.is_available()):
        return False
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return FREE_MEMORY_SHARE * nbytes <= free


def has_nonfinite(outputs) -> bool:
    """Whether a floating tensor of ``outputs`` holds a NaN or an Inf."""
    return any(bool((~torch.isfinite(chunk)).any()) for t in flatten(outputs)
               if isinstance(t, torch.Tensor) and t.is_floating_point() for _, (chunk,) in chunks(t))


def judged(expected, output, reference, make_inputs, device: str, atol, rtol,
           atol_scale: float = 1.0) -> tuple[str | None, object]:
    """For an ``output`` that misses ``expected``: the note of :func:`at_least_as_accurate` and the
    float64 answer it was judged against, or (None, None) where the answer does not keep it (out of
    rounding reach, no float64 run, the reference exact enough, ``output`` further than it).
    ``make_inputs`` gives the inputs, called only where the float64 run is made."""
    if not (within_rounding_reach(expected, output, atol, rtol) or has_nonfinite(expected)):
        return None, None
    exact = float64_output(reference, make_inputs(), device)
    note = exact is not None and at_least_as_accurate(exact, expected, output, atol, rtol, atol_scale)
    return (note, exact) if note else (None, None)


def judged_mismatch(expected, output, reference, inputs: list, device: str, atol, rtol) -> str | None:
    """``mismatch``, but None where ``output`` misses ``expected`` only as the reference misses its own
    float64 answer on ``inputs`` and is at least as accurate (the timed calls' checks)."""
    problem = mismatch(expected, output, atol, rtol)
    if problem is None or judged(expected, output, reference, lambda: inputs, device, atol, rtol)[0]:
        return None
    return problem


def at_least_as_accurate(exact, expected, output, atol, rtol, atol_scale: float = 1.0) -> str | None:
    """Where the reference's output ``expected`` is itself beyond the tolerance of ``exact`` (its
    float64 answer, cast back), whether ``output`` is no further from it: a note saying so, or None
    (the reference is within the tolerance of its answer, or ``output`` is further than it)."""
    exact = _like(exact, expected)
    if exact is None:
        return None
    reference = beyond_tolerance(exact, expected, atol, rtol, atol_scale)
    if reference is None:  # NaN or Inf placed apart from the answer's
        return _as_accurate_in_range(exact, expected, output, atol, rtol, atol_scale)
    if reference[0] == 0 or reference[2] > _rounding_bound(exact, expected):
        return None
    candidate = beyond_tolerance(exact, output, atol, rtol, atol_scale)
    if candidate is None or candidate[0] > reference[0] or candidate[1] > reference[1]:
        return None
    return (f"judged against float64, where the reference's own output is {reference[0]} elements beyond "
            f"the tolerance (largest excess {reference[1]:.3g}); the candidate's is {candidate[0]} "
            f"({max(candidate[1], 0.0):.3g})")


def _as_accurate_in_range(exact, expected, output, atol, rtol, atol_scale: float) -> str | None:
    """``at_least_as_accurate`` where the reference's NaN or Inf differ from its float64 answer's
    (cast back): ``output`` kept where it misses the answer at no more elements than the reference
    (see :func:`misses`) and by no larger excess where both are finite."""
    wide, narrow = flatten(exact), flatten(output)
    if len(wide) != len(narrow) or any(isinstance(e, torch.Tensor) and not (
            isinstance(a, torch.Tensor) and a.shape == e.shape and a.dtype == e.dtype) for e, a in zip(wide, narrow)):
        return None  # structure, shape or dtype: no answer judges that (compared without a copy)
    reference, candidate = misses(exact, expected, atol, rtol, atol_scale), misses(exact, output, atol, rtol, atol_scale)
    if reference is None or candidate is None or reference[0] == 0:
        return None
    if candidate[0] + candidate[1] > reference[0] + reference[1] or candidate[2] > max(reference[2], 0.0):
        return None
    return (f"judged against float64, where the reference's own output has NaN or Inf the answer lacks (or "
            f"the reverse) at {reference[0]} elements and {reference[1]} beyond the tolerance; the "
            f"candidate's at {candidate[0]} and {candidate[1]}")


def misses(exact, output, atol, rtol, atol_scale: float = 1.0) -> tuple[int, int, float] | None:
    """How ``output`` misses ``exact``, element by element over its floating tensors: where NaN or Inf
    differ (a NaN for a NaN and an Inf of the same sign match), where both are finite and beyond the
    tolerance, and the largest excess over it there (negative where none is); None for an output
    whose integers differ."""
    placed, beyond, worst = 0, 0, float("-inf")
    for e, a in zip(flatten(exact), flatten(output)):
        if not (isinstance(e, torch.Tensor) and e.is_floating_point()):
            if mismatch([e], [a], 0.0, 0.0) is not None:
                return None
            continue
        e_atol, e_rtol = tolerance_of(e.dtype, atol, rtol, atol_scale)
        for _, (ec, ac) in chunks(e, a):
            ef, af = ec.double(), ac.double()
            same = (ef == af) | (torch.isnan(ef) & torch.isnan(af))
            finite = torch.isfinite(ef) & torch.isfinite(af)
            placed += int((~same & ~finite).sum())
            excess = torch.where(finite, (af - ef).abs() - (e_atol + e_rtol * ef.abs()), float("-inf"))
            beyond += int((excess > 0).sum())
            if excess.numel():
                worst = max(worst, float(excess.max()))
    return placed, beyond, worst


def _rounding_bound(exact, expected, floor: float = 0.0) -> float:
    """The most the reference may differ from its float64 answer for the difference to count as its
    rounding: half the digits of its dtype (the square root of its epsilon: 3.5e-4 for fp32) of the
    answer's largest magnitude.  Beyond that the two differ for another reason (a random draw, a
    decision on a tie), and the float64 answer judges nothing."""
    epsilon = max((torch.finfo(t.dtype).eps for t in flatten(expected)
                   if isinstance(t, torch.Tensor) and t.is_floating_point()), default=0.0)
    return epsilon ** 0.5 * max(finite_abs_max(exact), floor)


def _like(exact, expected):
    """``exact``'s tensors cast to the dtypes of ``expected``'s, or None where their structure differs."""
    wide, narrow = flatten(exact), flatten(expected)
    if len(wide) != len(narrow):
        return None
    cast = []
    for w, n in zip(wide, narrow):
        if isinstance(w, torch.Tensor) and isinstance(n, torch.Tensor):
            if w.shape != n.shape:
                return None
            w = w.to(n.dtype)
        cast.append(w)
    return cast

"""Comparisons and fingerprints made a chunk at a time (no float64 copy of a whole output), and the
checks that rely on them: inputs made again from their seed, references that work in place."""
import pytest
import torch

import evaluator.compare as compare
from evaluator import Status
from evaluator.compare import digest, mismatch
from tests.support.candidates import TASK, candidate


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK", 1000)  # many chunks on small tensors
    monkeypatch.setattr(compare, "_WEIGHTS", {})  # the digest's weights, a chunk long: not kept after


def test_chunked_comparison_reports_as_a_whole_tensor_would(small_chunks):
    expected = torch.randn(3000, 7)
    assert mismatch(expected, expected.clone(), None, None) is None
    off = expected.clone()
    off[2000, 3] += 1.0
    assert "1 of 21000 elements beyond atol=0.0001" in mismatch(expected, off, None, None)
    assert "flat index 14003" in mismatch(expected, off, None, None)  # the index over the whole tensor
    nan = expected.clone()
    nan[5, 5] = float("nan")
    assert "NaN where the reference has none" in mismatch(expected, nan, None, None)
    inf = expected.clone()
    inf[2900, 0] = float("inf")
    assert "non-finite values" in mismatch(expected, inf, None, None)
    assert mismatch(expected.t(), expected.t().contiguous(), None, None) is None  # strided outputs
    assert "21000 of 21000" in mismatch(expected.t(), (expected + 1).t(), None, None)
    ints = torch.randint(0, 5, (5000,))
    other = ints.clone()
    other[4999] += 1
    assert mismatch(ints, other, None, None) == "1 of 5000 integer elements differ"


def test_digests_change_with_any_bit_and_canonical_ones_with_values(small_chunks):
    x = torch.randn(4096)
    assert digest(x) == digest(x.clone())
    y = x.clone()
    y[4000] = torch.nextafter(y[4000], torch.tensor(float("inf")))  # one ulp, in the last chunk
    assert digest(y) != digest(x)
    assert digest(torch.tensor([0.0])) != digest(torch.tensor([-0.0]))
    assert digest(torch.tensor([0.0]), canonical=True) == digest(torch.tensor([-0.0]), canonical=True)
    assert digest([x, 3]) != digest([x, 4]) and digest(x.half()) == digest(x.half().clone())


IN_PLACE_REFERENCE = TASK.replace("return x * 2.0", "x.mul_(2.0)\n        return x")
UNSEEDED_INPUTS = TASK.replace("return [torch.randn(n)]",
                               "import os\n    return [torch.randn(n) + int.from_bytes(os.urandom(1), 'little')]")
# Values that repeat only for the verifier's probe of repeatability (the two draws it makes in ``run``
# itself), new ones on every other draw: as an unseeded byte of entropy fools the probe 1 time in 256.
UNLUCKY_INPUTS = TASK.replace("return [torch.randn(n)]", """import sys
    callers, frame = [], sys._getframe()
    while frame is not None:
        callers.append(frame.f_code.co_name)
        frame = frame.f_back
    probed = "<lambda>" in callers and callers[callers.index("<lambda>") + 1] == "run"
    DRAWN.append(1)
    return [torch.randn(n) + (0 if probed else len(DRAWN))]""") + "\nDRAWN = []\n"


@pytest.mark.slow
def test_a_reference_that_works_in_place_is_checked_on_inputs_of_its_own(cpu_evaluator):
    result = cpu_evaluator.evaluate("double", IN_PLACE_REFERENCE, candidate())
    assert result.status is Status.CORRECT, result.reason


def test_inputs_that_the_seed_does_not_determine_are_copied_instead(cpu_evaluator):
    result = cpu_evaluator.evaluate("double", UNSEEDED_INPUTS, candidate())
    assert result.status is Status.CORRECT, result.reason
    cheat = candidate("x.fill_(1.0)")  # glue that writes its input: the reference must not see it
    assert cpu_evaluator.evaluate("double", UNSEEDED_INPUTS, cheat).status is Status.INCORRECT
    # the probe's two draws match by chance, later ones do not: found at the second call, then copied
    assert cpu_evaluator.evaluate("double", UNLUCKY_INPUTS, candidate()).status is Status.CORRECT


def test_inputs_scaled_up_scale_the_absolute_tolerance_only():
    """On inputs scaled by 1e3 an exact fp32 kernel rounds like 1e3 times larger terms: the adversarial
    check scales atol with them, and still refuses what range errors give (NaN, saturation)."""
    expected = torch.randn(4096, dtype=torch.float64).float() * 1e3
    rounded = expected + 0.05 * torch.sign(torch.randn(4096))  # partial sums of 1e3-scaled terms
    rounded[:10] = 0.05 * torch.sign(torch.randn(10)) + 1e-3  # near-zero outputs after cancellation
    expected[:10] = 1e-3
    assert "beyond atol=0.0001" in mismatch(expected, rounded, None, None)
    assert mismatch(expected, rounded, None, None, atol_scale=1e3) is None
    saturated = expected.clamp(-100, 100)
    assert "beyond atol=0.1, rtol=0.0001" in mismatch(expected, saturated, None, None, atol_scale=1e3)
    nan = expected.clone()
    nan[7] = float("nan")
    assert "NaN" in mismatch(expected, nan, None, None, atol_scale=1e3)
    off_by_ulps_of_half = expected.half().float()  # fp16 inside: relative 5e-4, beyond rtol at any scale
    assert mismatch(expected, off_by_ulps_of_half, None, None, atol_scale=1e3) is not None


def test_an_in_place_calls_input_copy_is_made_outside_its_window(monkeypatch):
    """Where the reference works in place, a kept call keeps a copy of its inputs: made by the timer's
    ``before_call``, ahead of the call's window, not inside it (where it timed against the candidate)."""
    import evaluator.timed_checks as timed_checks
    from evaluator.invoke import Outcome
    from evaluator.timing import time_interleaved

    window, copied_inside = [False], []
    copy = timed_checks.clone
    monkeypatch.setattr(timed_checks, "clone", lambda value: copied_inside.append(window[0]) or copy(value))

    def invoker(inputs, mode):
        inputs[0].mul_(2.0)  # in place, as the reference does
        return Outcome(output=inputs[0], launched=1)

    sets = [[torch.randn(64)] for _ in range(2)]
    timed = timed_checks.TimedCalls(invoker, sets, "cpu", keep=4, keep_inputs=True)

    def candidate():
        window[0] = True
        try:
            return timed()
        finally:
            window[0] = False

    time_interleaved(candidate, {"reference": lambda: None}, "cpu", warmup=1, reps=6, budget_s=10,
                     before_call=timed.before, after_call=timed.after)
    # a copy of the inputs before each of the 7 calls, and of the kept outputs after theirs: none inside
    assert len(copied_inside) >= 7 and not any(copied_inside)
    assert timed.kept and all(torch.equal(saved[0] * 2.0, out) for _, out, saved in timed.kept)  # as at the call

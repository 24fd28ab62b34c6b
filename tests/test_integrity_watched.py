"""Round three (CPU, Triton's interpreter): a candidate cannot tell a checked call from a timed one,
and cannot touch what the reference, the timer or the checks depend on.  Each cheat is caught with a
reason; the honest kernel beside them passes (tests/test_integrity.py, tests/test_evaluator.py)."""
import random
import statistics
import sys
import types

import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from tests.support.integrity_cheats import watched_cheats, watched_verdicts
from tests.support.candidates import TASK, candidate

LAUNCH = "        double_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)\n"
CHEATS = watched_cheats(candidate(), LAUNCH, "torch:mul", "CPU", "mul.Tensor")
# The same verdicts as on a GPU (tests/test_integrity_gpu.py), whatever the number of timed calls.
EXPECTED = watched_verdicts("torch:mul")


@pytest.fixture(scope="module")
def evaluator():
    ev = Evaluator(EvaluatorSettings(device="cpu", timeout_s=60), "cpu")
    yield ev
    ev.close()


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.slow
def test_each_cheat_is_caught_with_its_reason(evaluator, name):
    status, reason = EXPECTED[name]
    result = evaluator.evaluate("double", TASK, CHEATS[name][0])
    assert result.status is status and reason in result.reason, (name, result.status, result.reason, result.error)


def test_the_candidates_frames_reveal_nothing_of_the_calls_purpose():
    """Every call comes from the same frames on the model's own thread; what the caller knows (its
    function's name, a stage label) is not among them."""
    import torch

    from evaluator.invoke import Invoker

    seen = []

    class Spy(torch.nn.Module):
        def forward(self, x):
            frame, names = sys._getframe(), []
            while frame is not None:
                names.append(frame.f_code.co_name)
                names += [v for v in frame.f_locals.values() if isinstance(v, str)]
                frame = frame.f_back
            seen.append(names)
            return x * 2

    invoker = Invoker(Spy(), "cpu")
    try:
        def smoke_check_of_the_candidate():
            stage = "smoke test, checked"  # noqa: F841 (what a caller's frame would show)
            return invoker([torch.ones(3)])

        def timed_call_unchecked():
            return invoker([torch.ones(3)])

        assert smoke_check_of_the_candidate().output.tolist() == [2.0, 2.0, 2.0]
        assert timed_call_unchecked().launched == 0
    finally:
        invoker.close()
    assert seen[0] == seen[1]  # the same frames for both
    text = " ".join(seen[0]).lower()
    assert "check" not in text and "smoke" not in text and "timed" not in text, seen[0]


def test_the_kept_outputs_are_drawn_after_each_call_uniformly_over_the_sequence(monkeypatch):
    import evaluator.timed_checks
    from evaluator.invoke import Outcome
    from evaluator.timed_checks import TimedCalls

    # the draws seeded here (the engine's come from the OS): the bounds below hold for a fair draw
    # all but 1 time in 250 (the 40 counts' extremes), so an unseeded test would fail that often
    monkeypatch.setattr(evaluator.timed_checks, "secrets", types.SimpleNamespace(randbelow=random.Random(0).randrange))

    counts = [0] * 40
    for _ in range(300):
        timed = TimedCalls(lambda inputs, mode: Outcome(output=inputs[0]), [[1], [2], [3]], "cpu", keep=4)
        for _ in range(40):
            timed()
            timed.after()
        for number, *_ in timed.kept:
            counts[number] += 1
    # 1200 draws over 40 calls: 30 each on average; no call is favoured (the first ones included).
    assert sum(counts) == 1200 and min(counts) > 12 and max(counts) < 55, counts
    assert statistics.mean(counts[:4]) < 45


@pytest.mark.slow
def test_an_implausible_speedup_is_verified_again_in_a_fresh_process_with_every_timed_call_checked():
    """With the bound set below any speedup, every correct result is evaluated again.  No output is kept
    at random (timed_samples=0), so only the re-verification sees the one wrong timed call."""
    from tests.test_integrity import counting

    settings = EvaluatorSettings(device="cpu", timeout_s=60, plausible_speedup=1e-9, timed_samples=0)
    ev = Evaluator(settings, "cpu")
    try:
        honest = ev.evaluate("double", TASK, candidate())
        assert honest.status is Status.CORRECT, honest.reason
        assert "re-verified in a fresh process on fresh inputs" in honest.reason
        assert honest.extra["plausibility"]["status"] == "correct" and honest.extra["phases"]["reverify_s"] > 0
        # The second timed call (the checks make 16) returns a wrong output beside a launch of its own.
        once = counting(16, "if CALLS == 18:\n"
                            "                double_kernel[(1,)](x, out, 1, BLOCK_SIZE=BLOCK_SIZE)\n"
                            "                return torch.ones_like(x)")
        cheat = ev.evaluate("double", TASK, once)
        assert cheat.status is Status.INCORRECT, cheat.reason
        assert "re-verified" in cheat.reason and "timed call 2 " in cheat.reason, cheat.reason
    finally:
        ev.close()
    with pytest.raises(ValueError, match="plausible_speedup"):
        EvaluatorSettings(plausible_speedup=0)

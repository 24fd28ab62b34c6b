"""Timed calls' input values drawn afresh between calls (evaluator/fresh_inputs.py): no timed call sees
values an earlier one saw, so an output remembered by its inputs' values gains nothing; kept calls
are checked against the reference on the values they took."""
import pytest
import torch

from evaluator.calls import Failure, make_inputs
from evaluator.compare import digest
from evaluator.fresh_inputs import FreshInputs
from evaluator.invoke import Outcome
from evaluator.result import Status
from evaluator.timed_checks import SET_SEED_STEP, TimedCalls, check_kept, input_sets
from tests.support.candidates import candidate


class Doubling:
    @staticmethod
    def get_inputs(n=64):
        return [torch.randn(n), 2]


def _timed(invoker, sets_count=3, keep=0, every=False):
    sets = input_sets(Doubling, {}, 5, "cpu", {"input_sets": sets_count}, make_inputs(Doubling, {}, 5, "cpu"))
    fresh = FreshInputs(lambda s: make_inputs(Doubling, {}, s, "cpu"), sets,
                        seeds=[5 + SET_SEED_STEP * k for k in range(len(sets))])
    return TimedCalls(invoker, sets, "cpu", keep=keep, every=every, fresh=fresh)


def _timed_run(timed, calls):
    for _ in range(calls):
        timed.before()  # as the timer does, before the call's window opens: its set drawn afresh
        timed()
        timed.after()  # and once it has closed


def test_no_timed_call_sees_values_an_earlier_call_saw():
    seen, storages = [], set()

    def invoker(inputs, mode):
        seen.append(digest(inputs[0]))
        storages.add(inputs[0].data_ptr())
        return Outcome(output=inputs[0] * inputs[1], launched=1)

    timed = _timed(invoker)
    _timed_run(timed, 30)
    assert len(set(seen)) == 30  # every call new values
    assert len(storages) == 3  # in the sets' own storage
    assert all(timed.fresh.refreshed) and not timed.fresh.off


def test_an_output_remembered_by_its_inputs_values_never_comes_back():
    remembered, hits = {}, []

    def invoker(inputs, mode):
        key = tuple(inputs[0][:4].tolist())
        if key in remembered:
            hits.append(key)
            return Outcome(output=remembered[key].clone(), launched=1)
        remembered[key] = inputs[0] * inputs[1]
        return Outcome(output=remembered[key], launched=1)

    _timed_run(_timed(invoker), 30)
    assert hits == []
    # held to the sets as made before timing, the same candidate is served from memory after the first round
    plain = TimedCalls(invoker, _timed(invoker).sets, "cpu")
    remembered.clear()
    for _ in range(9):
        plain()
    assert len(hits) == 6


def test_kept_calls_are_checked_on_the_values_they_took():
    def honest(inputs, mode):
        return Outcome(output=inputs[0] * inputs[1], launched=1)

    reference = lambda x, k: x * k  # noqa: E731
    timed = _timed(honest, every=True)
    _timed_run(timed, 12)
    assert check_kept(timed, reference, 1e-6, 1e-6) == 12

    # wrong on a call whose values came afresh: the check makes them again and sees it
    calls = []

    def wrong_on_the_seventh(inputs, mode):
        calls.append(1)
        return Outcome(output=inputs[0] * (3 if len(calls) == 7 else inputs[1]), launched=1)

    timed = _timed(wrong_on_the_seventh, every=True)
    _timed_run(timed, 12)
    with pytest.raises(Failure) as caught:
        check_kept(timed, reference, 1e-6, 1e-6)
    assert caught.value.status is Status.INCORRECT and "timed call 7" in caught.value.reason


def test_what_each_set_should_hold_is_made_again_from_its_last_seed():
    timed = _timed(lambda inputs, mode: Outcome(output=inputs[0] * 2, launched=1))
    before = [digest(s) for s in timed.sets]
    _timed_run(timed, 2)  # sets 1 and 2 drawn afresh (before calls 1 and 2), set 3 not yet
    expected = timed.fresh.digests(before)
    assert expected[2] == before[2] and expected[0] != before[0] and expected[1] != before[1]
    assert expected == [digest(s) for s in timed.sets]


class _PlainValueMoves:
    calls = 0

    @classmethod
    def get_inputs(cls):
        cls.calls += 1
        return [torch.randn(8), cls.calls]


class _Expanded:
    @staticmethod
    def get_inputs():
        return [torch.randn(1, 8).expand(4, 8)]


@pytest.mark.parametrize("task, why", [(_PlainValueMoves, "plain values"), (_Expanded, "share memory")])
def test_sets_that_cannot_be_made_again_alike_are_left_as_they_are(task, why):
    sets = [make_inputs(task, {}, 1, "cpu"), make_inputs(task, {}, 2, "cpu")]
    held = [digest(s) for s in sets]
    fresh = FreshInputs(lambda s: make_inputs(task, {}, s, "cpu"), sets, seeds=[1, 2])
    fresh.refresh(0)
    assert why in fresh.off and [digest(s) for s in sets] == held and not any(fresh.refreshed)


def test_sets_past_the_budget_are_not_drawn_afresh():
    sets = [make_inputs(Doubling, {"n": 1024}, 1, "cpu")]
    fresh = FreshInputs(lambda s: make_inputs(Doubling, {"n": 1024}, s, "cpu"), sets, seeds=[1], limit_bytes=1000)
    assert "timing.fresh_inputs_mb" in fresh.off
    # the new values are made beside the set: without room for them on the device, the values stay
    fresh = FreshInputs(lambda s: make_inputs(Doubling, {"n": 1024}, s, "cpu"), sets, seeds=[1], room_bytes=4000)
    assert "no room on the device" in fresh.off
    assert not FreshInputs(lambda s: make_inputs(Doubling, {"n": 1024}, s, "cpu"), sets, seeds=[1],
                           limit_bytes=4096, room_bytes=4096).off


def test_the_default_draws_afresh_every_kernelbench_input_set_up_to_8_gb():
    from evaluator.settings import TimingSettings

    assert TimingSettings().fresh_inputs and TimingSettings().fresh_inputs_mb == 8192  # 198 of its 200 problems


class _GradInput:
    @staticmethod
    def get_inputs():
        return [torch.nn.Parameter(torch.randn(8))]


def test_an_input_that_requires_grad_is_drawn_afresh_all_the_same():
    sets = [make_inputs(_GradInput, {}, 1, "cpu")]
    fresh = FreshInputs(lambda s: make_inputs(_GradInput, {}, s, "cpu"), sets, seeds=[1])
    before = sets[0][0].detach().clone()
    fresh.refresh(0)
    assert not fresh.off and fresh.refreshed == [True] and not torch.equal(before, sets[0][0])
    assert torch.equal(sets[0][0], make_inputs(_GradInput, {}, fresh.seeds[0], "cpu")[0])


def _sleeping(delays: list[float]):
    """A get_inputs that sleeps each delay in turn (then none) before making Doubling's inputs."""
    import time

    def make(seed):
        time.sleep(delays.pop(0) if delays else 0.0)
        return make_inputs(Doubling, {}, seed, "cpu")
    return make


def test_a_get_inputs_slow_as_a_rule_is_drawn_afresh_no_longer():
    sets = [make_inputs(Doubling, {}, 1, "cpu"), make_inputs(Doubling, {}, 2, "cpu")]
    fresh = FreshInputs(_sleeping([0.02] * 10), sets, seeds=[1, 2], limit_s=0.005)
    fresh.refresh(0)  # the first pays for first uses: not held to the limit
    assert fresh.refreshed == [True, False] and not fresh.off
    for k in range(4):  # four slow draws past the first: too few to say it is slow as a rule
        fresh.refresh(1 - k % 2)
        assert not fresh.off, k
    fresh.refresh(0)  # the fifth: their median past the limit, made again and found slow
    assert "a median" in fresh.off and "ms of the host's time" in fresh.off and fresh.made == 6
    held = digest(sets[0])
    fresh.refresh(0)
    assert digest(sets[0]) == held and fresh.made == 6
    assert torch.equal(sets[0][0], make_inputs(Doubling, {}, fresh.seeds[0], "cpu")[0])  # still checkable


def test_a_draw_slow_once_costs_no_check_but_one_past_the_cap_stops_the_next():
    from evaluator.fresh_inputs import FRESH_HOST_CAP_S

    sets = [make_inputs(Doubling, {}, 1, "cpu")]
    # first draw, then one hiccup of 60 ms (a busy host, a collection) among quick ones; the limit
    # 20 ms, so that a quick draw on a loaded machine stays quick (it takes four slow ones of six)
    fresh = FreshInputs(_sleeping([0.0, 0.06, 0.0, 0.0, 0.0, 0.0, 0.0]), sets, seeds=[1], limit_s=0.02)
    for _ in range(7):
        fresh.refresh(0)
    assert not fresh.off and fresh.made == 7 and fresh.slow_draws >= 1
    median, most = fresh.host_ms()
    assert median <= most and most >= 60
    fresh = FreshInputs(_sleeping([0.0, FRESH_HOST_CAP_S + 0.02]), sets, seeds=[1], limit_s=0.005)
    fresh.refresh(0)
    fresh.refresh(0)
    assert "in one draw" in fresh.off and fresh.made == 2


def test_a_first_draw_past_its_own_limit_is_the_last(monkeypatch):
    import time

    import evaluator.fresh_inputs as fresh_inputs

    monkeypatch.setattr(fresh_inputs, "FIRST_HOST_LIMIT_S", 0.01)  # 1 s: a get_inputs of GBs on the CPU

    def slow(seed):
        time.sleep(0.02)
        return make_inputs(Doubling, {}, seed, "cpu")

    fresh = FreshInputs(slow, [make_inputs(Doubling, {}, 1, "cpu")], seeds=[1], limit_s=0.005)
    fresh.refresh(0)  # it would take seconds again for the second
    assert fresh.refreshed == [True] and "ms of the host's time" in fresh.off


def test_the_values_made_beside_a_set_are_poisoned_once_copied_into_it():
    made = []

    def keeping(seed):
        made.append(make_inputs(Doubling, {}, seed, "cpu"))
        return made[-1]

    sets = [make_inputs(Doubling, {}, 1, "cpu")]
    fresh = FreshInputs(keeping, sets, seeds=[1])
    fresh.refresh(0)
    # freed just before the candidate's call, they would be the memory its output gets: its inputs
    assert torch.isnan(made[0][0]).all() and not torch.isnan(sets[0][0]).any()
    assert torch.equal(sets[0][0], make_inputs(Doubling, {}, fresh.seeds[0], "cpu")[0])


class _Refilled:
    buffer = None

    @classmethod
    def get_inputs(cls):
        if cls.buffer is None:
            cls.buffer = torch.empty(8)
        return [cls.buffer.normal_()]


class _InADict:
    @staticmethod
    def get_inputs():
        return [torch.randn(8), {"scale": torch.randn(2)}]


@pytest.mark.parametrize("task, why", [(_Refilled, "share storage"), (_InADict, "neither a tensor nor a plain value")])
def test_sets_whose_values_a_seed_would_not_say_are_not_drawn_afresh(task, why):
    sets = [make_inputs(task, {}, 1, "cpu"), make_inputs(task, {}, 2, "cpu")]
    fresh = FreshInputs(lambda s: make_inputs(task, {}, s, "cpu"), sets, seeds=[1, 2])
    fresh.refresh(0)
    assert why in fresh.off and not any(fresh.refreshed)


def test_drawn_afresh_a_timed_call_is_held_to_the_fewest_launches_of_any_checked_call():
    from evaluator.timed_checks import check_launches

    def by_value(inputs, mode):  # an honest kernel whose launches follow its values: one or two
        return Outcome(output=inputs[0] * inputs[1], launched=1 + int(inputs[0][0] > 0))

    timed = _timed(by_value)
    _timed_run(timed, 30)
    timed.launches = [1 + (c % 3 == 1 and c % 2 == 0) for c in range(30)]  # set 2's calls: one or two, by value
    # checked: a call of set 1 that launched one, and one of set 2 that launched two; held to its own
    # set's checked calls, set 2's calls that launched one would be refused
    timed.checked = [0, 4]
    assert check_launches(timed)["launches"] == [1, 2]
    timed.launches[10] = 0
    with pytest.raises(Failure) as caught:
        check_launches(timed)
    assert "launched no Triton kernel" in caught.value.reason


class _NeedsTheCPU:
    """A ``get_inputs`` that cannot run with another default device (it hands its tensor to NumPy)."""

    @staticmethod
    def get_inputs():
        if torch.get_default_device().type != "cpu":
            raise TypeError("can't convert to numpy")
        return [torch.rand(4)]


class _OutOfMemoryOnTheDevice:
    @staticmethod
    def get_inputs():
        if torch.get_default_device().type != "cpu":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return [torch.rand(4)]


def test_inputs_fall_back_to_the_cpu_only_for_a_get_inputs_that_needs_it():
    # ("meta" stands for the GPU: any device but the CPU takes the device's path first)
    assert make_inputs(_NeedsTheCPU, {}, 3, "meta")[0].device.type == "meta"
    # Out of memory is no reason to draw the values from the CPU's generator: they would differ from
    # the device's, and calls checked side by side would take inputs of other values.
    with pytest.raises(torch.cuda.OutOfMemoryError):
        make_inputs(_OutOfMemoryOnTheDevice, {}, 3, "meta")


POINTER_CACHE = candidate(
    "global CALLS, SEEN\n        CALLS = globals().get('CALLS', 0) + 1\n        SEEN = globals().get('SEEN', {})\n"
    "        if CALLS > 16 and (x.data_ptr(), x.shape) in SEEN:\n"
    "            double_kernel[(1,)](x, torch.empty(1), 1, BLOCK_SIZE=BLOCK_SIZE)\n"
    "            return SEEN[(x.data_ptr(), x.shape)].clone()").replace(
    "        return out", "        SEEN[(x.data_ptr(), x.shape)] = out.clone()\n        return out")


@pytest.mark.slow
def test_an_output_copied_from_a_cache_keyed_by_the_inputs_address_is_wrong_on_sets_past_the_budget():
    """Past ``input_sets_mb`` the timed calls take two sets in turn (KernelBench's inputs of GBs): held to
    the same values, a candidate that remembers its output by its input's address and copies it (a
    useless launch beside it) is right on every call.  Drawn afresh up to ``fresh_inputs_mb``, it is not."""
    from evaluator import Evaluator, EvaluatorSettings
    from evaluator.settings import TimingSettings
    from tests.support.candidates import TASK

    def evaluate(fresh_inputs_mb: float):
        timing = TimingSettings(warmup=1, reps=3, budget_s=1.0, batch=1, input_sets_mb=0.001,
                                fresh_inputs_mb=fresh_inputs_mb)
        evaluator = Evaluator(EvaluatorSettings(device="cpu", timeout_s=60, cpu_timing=timing), "cpu")
        try:
            return evaluator.evaluate("double", TASK, POINTER_CACHE)
        finally:
            evaluator.close()

    held = evaluate(fresh_inputs_mb=0.001)  # the sets as large as 8 GB stand for
    assert held.status is Status.CORRECT and held.extra["timed_checks"]["input_sets"] == 2, held.reason
    verified = held.extra["timed_checks"]  # the result says why its inputs were not drawn afresh
    assert verified["fresh_inputs"] is False and "timing.fresh_inputs_mb" in verified["fresh_inputs_off"]
    drawn = evaluate(fresh_inputs_mb=8192)
    assert drawn.status is Status.INCORRECT and "timed call" in drawn.reason, drawn.reason


def test_the_candidate_is_the_first_to_see_each_value_no_baseline_timed_before_it_did():
    """Rounds alternate who goes first; a set is drawn afresh just before the candidate's call, so what
    a baseline left in memory (its output, its intermediates) is never the answer to that call."""
    from evaluator.timed_checks import in_turn
    from evaluator.timing import time_interleaved

    seen_by_reference, seen_by_candidate, first_seen_by_candidate = set(), set(), []

    def invoker(inputs, mode):
        first_seen_by_candidate.append(digest(inputs[0]) not in seen_by_reference)
        seen_by_candidate.add(digest(inputs[0]))
        return Outcome(output=inputs[0] * inputs[1], launched=1)

    timed = _timed(invoker)
    initial = {digest(s[0]) for s in timed.sets}
    reference = in_turn(lambda x, k: seen_by_reference.add(digest(x)) or x * k, timed.sets, "reference")
    time_interleaved(timed, {"reference": reference}, "cpu", warmup=2, reps=12, budget_s=10,
                     before_call=timed.before, after_call=timed.after)
    assert len(first_seen_by_candidate) == 14 and all(first_seen_by_candidate)
    # the reference timed on the candidate's values, or on a set's first ones (as the rounds fall)
    assert seen_by_reference <= seen_by_candidate | initial and len(seen_by_candidate) == 14

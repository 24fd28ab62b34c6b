"""The timing loop (evaluator.timing): interleaved rounds, going on from an earlier round, the spin
that leads a batch, input sets taken in turn, and stopping once the speedup is precise enough."""
import itertools
import time
import types

import pytest

from evaluator import timing
from evaluator.timing import time_interleaved


@pytest.fixture
def sleeper(monkeypatch):
    """Callables that advance a clock only they move, by their durations in turn (ms), each call's
    ``name`` logged in ``log`` if given: ratios are exact, however loaded the machine."""
    now = [0.0]
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: now[0],
                                                              monotonic=time.monotonic))

    def make(*durations_ms: float, name: str = "", log: list | None = None):
        durations = itertools.cycle(durations_ms)

        def call():
            if log is not None:
                log.append(name)
            now[0] += next(durations) / 1e3
        return call
    return make


def test_interleaved_timing_pairs_each_baseline_with_the_candidate(sleeper):
    timed = time_interleaved(sleeper(2), {"twice": sleeper(4), "thrice": sleeper(6)}, "cpu",
                             warmup=1, reps=9, budget_s=600.0, batch=1)
    assert set(timed) == {"twice", "thrice"}
    assert timed["twice"].candidate is timed["thrice"].candidate and timed["twice"].candidate.samples == 9
    assert timed["twice"].ratio == pytest.approx(2.0) and timed["thrice"].ratio == pytest.approx(3.0)


def test_a_second_round_goes_on_from_the_samples_of_the_first(sleeper):
    calls = []
    candidate, reference = sleeper(2, name="c", log=calls), sleeper(5, name="r", log=calls)
    raw = [[], []]
    first = time_interleaved(candidate, {"r": reference}, "cpu", warmup=1, reps=3,
                             budget_s=600.0, batch=1, samples=raw)
    assert first["r"].candidate.samples == 3 and len(calls) == 2 * (1 + 3)
    calls.clear()
    full = time_interleaved(candidate, {"r": reference}, "cpu", warmup=0, reps=10,
                            budget_s=600.0, batch=1, samples=raw)
    assert len(calls) == 2 * 7  # only the rounds the first did not take, no warm-up
    assert full["r"].candidate.samples == 10 and len(raw[1]) == 10 and full["r"].ratio == pytest.approx(2.5)
    with pytest.raises(ValueError, match="one list per callable"):
        time_interleaved(candidate, {"r": reference}, "cpu", warmup=0, reps=4,
                         budget_s=1.0, samples=[[1.0], []])


def test_a_batch_is_timed_again_only_where_the_gpu_may_have_reached_a_call_before_the_host_queued_it():
    from evaluator.timing import host_late

    # Calls of 10 ms behind a 1 ms spin: the host queued each within the calls before it.
    assert not host_late([0.4, 0.9, 1.3, 1.8], [1.1, 11.2, 21.3, 31.4])
    # Calls of 5 us: the GPU reached the third before the host had queued it.
    assert host_late([0.4, 0.9, 1.3, 1.8], [1.1, 1.2, 1.3, 1.31])
    # The first call still being queued when the spin ended.
    assert host_late([1.5, 1.6], [1.1, 11.2])


def test_the_next_spin_covers_twice_what_the_host_ran_ahead_of_the_gpus_own_work():
    from evaluator.timing import next_lead

    assert next_lead([0.3, 0.6], [1.1, 11.2]) == 1.0  # long calls: the floor holds
    assert next_lead([0.4, 0.9, 1.3, 1.8], [1.1, 1.2, 1.3, 1.31]) == pytest.approx(2 * (1.8 - 0.21))
    assert next_lead([400.0], [1.1]) == 100.0  # a candidate that synchronises: capped
    assert next_lead([], []) == 1.0


def test_timed_calls_of_one_round_take_the_same_input_set():
    import torch

    from evaluator.timed_checks import in_turn as _in_turn

    seen = {"candidate": [], "reference": []}
    sets = [[torch.full((2,), float(k))] for k in range(3)]

    def recorder(name):
        return lambda x: seen[name].append(int(x[0])) or x

    time_interleaved(_in_turn(recorder("candidate"), sets, "timing"),
                     {"reference": _in_turn(recorder("reference"), sets, "reference timing")}, "cpu",
                     warmup=2, reps=7, budget_s=5.0, batch=1)
    assert seen["candidate"] == seen["reference"] == [k % 3 for k in range(9)]


def test_timing_stops_once_the_speedup_is_precise_enough_and_not_before_min_reps(sleeper):
    args = dict(warmup=1, reps=40, budget_s=600.0, batch=1)
    steady = time_interleaved(sleeper(2), {"r": sleeper(4)}, "cpu", **args, precision=0.01, min_reps=6)["r"]
    assert steady.candidate.samples == 6 and steady.ratio == pytest.approx(2.0) and steady.noise < 1e-9
    # A candidate whose calls vary keeps its speedup noisy: every rep is taken.
    jumpy = time_interleaved(sleeper(2, 3, 5), {"r": sleeper(4)}, "cpu", **args, precision=0.01, min_reps=6)["r"]
    assert jumpy.candidate.samples == 40 and jumpy.noise > 0.01
    # Off (0): reps, however steady.
    assert time_interleaved(sleeper(2), {"r": sleeper(4)}, "cpu", **args)["r"].candidate.samples == 40


def test_the_warm_up_goes_through_the_timer_as_the_timed_rounds_do(sleeper, monkeypatch):
    # On a GPU the timer flushes the L2 and records events around each call: warm-up calls made bare
    # left the first timed rounds slower than the rest (throughput_bench.md, round 11).
    batches = []
    run = timing._WallTimer.run
    monkeypatch.setattr(timing._WallTimer, "run", lambda self, calls, hooks: batches.append(len(calls)) or run(self, calls, hooks))
    timed = time_interleaved(sleeper(2), {"r": sleeper(4)}, "cpu", warmup=3, reps=5, budget_s=600.0, batch=1)
    assert batches == [2] * (3 + 5) and timed["r"].candidate.samples == 5

"""An evaluator's warm start (EvaluatorSettings.warm_start): its workers started in the background as
it is made, so that the first evaluations of a search do not pay for them; on the CPU."""
import importlib
import sys
import threading
import time

import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evaluator.worker import KERNEL_HELPERS, preload_kernel_helpers
from tests.support.candidates import TASK, candidate
from tests.test_durability import sandbox_workers  # this test's live workers, by their scratch


def warmed(evaluator: Evaluator) -> Evaluator:
    """``evaluator`` once its warm start is over (each worker started and settled)."""
    evaluator.wait_warm()
    return evaluator


def test_warm_start_defaults_to_gpus_only():
    assert EvaluatorSettings().warm_start is None
    evaluator = Evaluator(EvaluatorSettings(device="cpu"), "cpu")
    try:
        assert evaluator._warming == [] and evaluator.worker.pid() is None  # started by its first request
    finally:
        evaluator.close()


@pytest.mark.slow
def test_a_warm_started_pipeline_runs_before_its_first_evaluation_and_is_not_started_again(tmp_path):
    settings = EvaluatorSettings(device="cpu", warm_start=True, pipeline=2, compile_baseline=False)
    evaluator = Evaluator(settings, "cpu", scratch_root=str(tmp_path))
    try:
        pids = [w.pid() for w in warmed(evaluator).workers]
        assert all(pids), "the workers did not start before any request"
        result = evaluator.evaluate("double", TASK, candidate())
        assert result.status is Status.CORRECT, result.reason
        assert [w.pid() for w in evaluator.workers] == pids and [w.restarts for w in evaluator.workers] == [0, 0]
    finally:
        evaluator.close()
    assert sandbox_workers(tmp_path) == []


@pytest.mark.slow
def test_a_request_during_the_warm_start_waits_for_it_instead_of_starting_a_second_worker(tmp_path):
    settings = EvaluatorSettings(device="cpu", warm_start=True, compile_baseline=False)
    evaluator = Evaluator(settings, "cpu", scratch_root=str(tmp_path))  # its worker starting in a thread
    try:
        reply = evaluator.check_task("double", TASK)
        assert reply.ok, reply
        assert evaluator.worker.restarts == 0  # one start: the warm start's
    finally:
        evaluator.close()
    assert sandbox_workers(tmp_path) == []


@pytest.mark.slow
def test_an_evaluator_closed_while_it_warms_leaves_no_worker_behind(tmp_path):
    settings = EvaluatorSettings(device="cpu", warm_start=True, pipeline=3, compile_baseline=False)
    Evaluator(settings, "cpu", scratch_root=str(tmp_path)).close()
    assert sandbox_workers(tmp_path) == []


def test_the_kernel_helpers_a_gpu_worker_preloads_exist_in_this_torch_and_triton():
    preload_kernel_helpers()
    for name in KERNEL_HELPERS:
        assert name in sys.modules, name
        importlib.import_module(name)


@pytest.mark.slow
def test_requests_from_two_threads_on_one_worker_take_turns():
    """As `evo eval` checks its task on the first worker while the warm start measures the GPU's
    peaks on it: each request gets its own reply, never the other's (one pipe carries both)."""
    slow = TASK.replace("def get_inputs(n=1000):", "def get_inputs(n=1000):\n    __import__('time').sleep(0.3)")
    broken = TASK.replace("def get_inputs(n=1000):", "def get_inputs(n=1000):\n    raise ValueError('broken reference')")
    assert slow != TASK and broken != TASK
    evaluator = Evaluator(EvaluatorSettings(device="cpu", compile_baseline=False), "cpu")
    try:
        for _ in range(3):
            replies = {}

            def check(name: str, source: str) -> None:
                replies[name] = evaluator.check_task(name, source)

            threads = [threading.Thread(target=check, args=args, daemon=True)
                       for args in (("slow", slow), ("broken", broken))]
            for thread in threads:
                thread.start()
                time.sleep(0.05)
            for thread in threads:
                thread.join(90)
            assert replies["slow"].ok, replies
            assert not replies["broken"].ok and "broken reference" in replies["broken"].error, replies
    finally:
        evaluator.close()


@pytest.mark.slow
def test_the_baseline_worker_is_warm_started_where_a_cached_baseline_will_be_measured(tmp_path):
    settings = EvaluatorSettings(device="cpu", warm_start=True, compile_baseline=True, compile_backend="aot_eager")
    evaluator = Evaluator(settings, "cpu", scratch_root=str(tmp_path))
    try:
        assert evaluator.baselines.worker is not None and evaluator.baselines.worker not in evaluator.workers
        deadline = time.monotonic() + 120
        while evaluator.baselines.worker.pid() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert evaluator.baselines.worker.pid() is not None
    finally:
        evaluator.close()
    assert sandbox_workers(tmp_path) == []
    live = Evaluator(EvaluatorSettings(device="cpu", warm_start=True, compile_baseline=True, compile_timing="live",
                                       compile_backend="aot_eager"), "cpu", scratch_root=str(tmp_path))
    try:
        assert live.baselines.worker is None  # compiled in each evaluation: no worker of its own
    finally:
        live.close()


@pytest.mark.slow
def test_the_warm_start_tries_the_containment_so_the_first_evaluation_does_not(tmp_path):
    settings = EvaluatorSettings(device="cpu", warm_start=True, pipeline=2, compile_baseline=False)
    evaluator = Evaluator(settings, "cpu", scratch_root=str(tmp_path))
    try:
        for worker in warmed(evaluator).workers:  # each worker already holds the trial's outcome
            again = evaluator._request("settle", "", "", worker=worker)
            assert again.ok and again.tried_now is False, again
        result = evaluator.evaluate("double", TASK, candidate())
        assert result.status is Status.CORRECT, result.reason
        off = again.containment_off
        assert result.extra["containment"].get("namespaces_off", "") == off["namespaces_off"]
    finally:
        evaluator.close()
    cold = Evaluator(EvaluatorSettings(device="cpu", compile_baseline=False), "cpu", scratch_root=str(tmp_path))
    try:
        first = cold._request("settle", "", "", worker=cold.worker)  # no warm start: tried by this request
        assert first.ok and first.tried_now is True
    finally:
        cold.close()

"""An evaluation or a task check that runs out of GPU memory beside others is tried again alone
(evaluator.Evaluator): the engine's own company is never held against a candidate or a task."""
import threading
import time

import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from tests.support.candidates import TASK, candidate


@pytest.fixture(scope="module")
def pipelined():
    ev = Evaluator(EvaluatorSettings(device="cpu", timeout_s=60, pipeline=2), "cpu")
    yield ev
    ev.close()


def test_a_task_out_of_memory_beside_a_search_is_prepared_again_with_the_device_to_itself(monkeypatch):
    """Prepared while evaluations run, a task that ran out of GPU memory is checked again once every
    evaluation in flight has ended and before any other starts (a stopped one would keep its memory)."""
    from evaluator import Preparation

    ev = Evaluator(EvaluatorSettings(device="cpu", pipeline=2), "cpu")
    idle_when_checked = []

    def request(kind, task_name, task_source, *, worker=None, **extra):
        idle_when_checked.append(ev.pool.idle())
        if len(idle_when_checked) == 1:
            return {"ok": False, "stage": "memory", "error": "CUDA out of memory beside the others"}
        return {"ok": True}

    monkeypatch.setattr(ev, "_send", request)
    try:
        in_flight = ev.pool.take()  # an evaluation under way
        outcome = {}
        preparing = threading.Thread(target=lambda: outcome.update(ev.prepare([Preparation("big", TASK, False)])))
        preparing.start()
        time.sleep(0.5)
        assert idle_when_checked == [1]  # checked once beside it; again only once it is over
        ev.pool.give(in_flight)
        preparing.join(10)
        assert idle_when_checked == [1, 0] and outcome["big"].check.ok
        assert ev.pool.idle() == 2  # the pipeline's workers back
    finally:
        monkeypatch.undo()
        ev.close()


@pytest.mark.slow
def test_an_evaluation_out_of_memory_beside_others_is_tried_again_alone_and_its_cost_recorded(pipelined, monkeypatch):
    asked, real = [], Evaluator._send

    def request(self, kind, task_name, task_source, **extra):
        if kind == "evaluate":
            asked.append(bool(extra.get("exclusive")))
            if len(asked) == 1:  # the first attempt: as a candidate's allocation would fail beside others
                time.sleep(0.2)
                return {"status": "runtime_error", "reason": "torch.OutOfMemoryError: CUDA out of memory.",
                        "extra": {"out_of_memory": True}}
        return real(self, kind, task_name, task_source, **extra)

    monkeypatch.setattr(Evaluator, "_send", request)
    result = pipelined.evaluate("double", TASK, candidate())
    assert result.status is Status.CORRECT, result.reason
    assert asked == [False, True]
    assert result.extra["phases"]["oom_retry_s"] >= 0.2


def test_an_evaluation_still_out_of_memory_alone_on_the_gpu_is_tried_once_more_with_the_device_to_itself(monkeypatch):
    """Tried again with the GPU alone, it can still run out: the evaluations stopped meanwhile keep their
    memory.  The third attempt waits until every evaluation in flight has ended, and none starts
    beside it; out of memory then, the result is the candidate's."""
    ev = Evaluator(EvaluatorSettings(device="cpu", pipeline=2), "cpu")
    asked = []  # (exclusive, workers idle) per attempt

    def request(kind, task_name, task_source, *, worker=None, **extra):
        asked.append((bool(extra.get("exclusive")), ev.pool.idle()))
        if len(asked) < 3 or extra.get("candidate_source") == "hog":
            return {"status": "runtime_error", "reason": "torch.OutOfMemoryError: CUDA out of memory.",
                    "extra": {"out_of_memory": True}}
        return {"status": "correct", "reason": "passed", "speedup": 1.0}

    monkeypatch.setattr(ev, "_send", request)
    try:
        in_flight = ev.pool.take()  # another evaluation under way
        out = {}
        scoring = threading.Thread(target=lambda: out.update(r=ev.evaluate("double", TASK, "fits")))
        scoring.start()
        time.sleep(0.5)
        assert asked == [(False, 0), (True, 0)]  # beside the other; then alone, its memory still held
        ev.pool.give(in_flight)
        scoring.join(10)
        assert asked[2] == (True, 0)  # every worker held: none in flight, none starting
        assert out["r"].status is Status.CORRECT and out["r"].extra["phases"]["oom_retry_s"] >= 0.5
        assert ev.pool.idle() == 2
        asked.clear()
        hog = ev.evaluate("double", TASK, "hog")  # out of memory with the device to itself: its own
        assert hog.status is Status.RUNTIME_ERROR and [e for e, _ in asked] == [False, True, True]
    finally:
        monkeypatch.undo()
        ev.close()


@pytest.mark.slow
def test_running_out_of_memory_is_told_by_the_exception_not_by_the_message(pipelined):
    """The sandbox decides on the exception it caught: PyTorch's OutOfMemoryError is out of memory
    (and tried again alone on a GPU); a candidate's own error that merely says "out of memory" is not,
    so it cannot buy itself the GPU alone."""
    from evaluator.replies import out_of_memory, read

    real = pipelined.evaluate("double", TASK, candidate("raise torch.OutOfMemoryError('CUDA out of memory.')"))
    said = pipelined.evaluate("double", TASK, candidate("raise RuntimeError('CUDA out of memory. (it says)')"))
    assert real.status is Status.RUNTIME_ERROR and real.extra.get("out_of_memory") is True, real.reason
    assert said.status is Status.RUNTIME_ERROR and "out_of_memory" not in said.extra, said.reason
    def told(raw):  # as the worker's answer is read on the host
        return out_of_memory(read("evaluate", raw, 60))

    assert told({"status": "runtime_error", "reason": "CUDA out of memory", "extra": {}}) is False
    assert told({"status": "runtime_error", "extra": {"out_of_memory": True}}) is True
    assert told({"harness_error": "x", "out_of_memory": True}) is True
    assert told({"sandbox": "memory", "reason": "used 9000 MiB of host memory"}) is False  # the host's, not the GPU's

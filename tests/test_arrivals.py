"""Tasks joining a run while it searches (evo.loop.arrivals): the rest of a start-up's preparation."""
import json
import threading
import time

import pytest

from archive import Archive
from evaluator import PreparedTask, TaskCheck
from evo.loop.arrivals import TaskArrivals
from evo.loop.controller import Controller
from evo.views.progress import RunEvents
from evo.loop.run_settings import RunSettings
from evo.loop.startup import Prepared, SetAside, prepare_stream, prepare_tasks
from islands import Island, LocalBackend, MigrationSettings
from islands.backend import merged
from operators import TunableConstantMutation
from tests.support.llm_server import TrivialEvaluator
from tests.support import StandInBackend


def _piece(*tasks, aside=()):
    return Prepared(tasks=list(tasks), set_aside=list(aside), kept_aside=[])


def test_arrivals_hand_over_what_came_and_end_with_the_stream():
    go = threading.Event()

    def stream():
        yield _piece("a")
        go.wait(5)
        yield _piece("b")

    arrivals = TaskArrivals(stream())
    arrivals.waiting().result(timeout=5)
    assert [p.tasks for p in arrivals.take()] == [["a"]]
    waiting = arrivals.waiting()
    assert waiting is not None and not waiting.done() and arrivals.open
    go.set()
    waiting.result(timeout=5)
    arrivals.join(5)
    assert [p.tasks for p in arrivals.take()] == [["b"]]
    assert arrivals.waiting() is None and not arrivals.open


def test_a_failed_preparation_is_raised_on_the_taker_after_what_came_before_it():
    def stream():
        yield _piece("a")
        raise RuntimeError("the evaluator actor died")

    arrivals = TaskArrivals(stream())
    arrivals.join(5)
    assert [p.tasks for p in arrivals.take()] == [["a"]]
    with pytest.raises(RuntimeError, match="actor died"):
        arrivals.take()
    assert arrivals.waiting() is None


def test_merged_streams_come_as_they_are_made_and_a_failure_is_raised_at_the_end():
    slow = threading.Event()

    def first():
        slow.wait(5)
        yield 1

    def second():
        yield 2
        slow.set()

    assert list(merged([first, second])) == [2, 1]

    def broken():
        yield 3
        raise ValueError("broken stream")

    seen = []
    with pytest.raises(ValueError, match="broken stream"):
        for item in merged([broken, lambda: iter([4])]):
            seen.append(item)
    assert sorted(seen) == [3, 4]


class StreamingBackend(StandInBackend):
    """Outcomes in the order given, whatever the order of the tasks."""

    def __init__(self, order, failing=()):
        self.order, self.failing = order, set(failing)

    def prepare_stream(self, tasks):
        wanted = {t.name for t in tasks}
        for name in self.order:
            if name in wanted:
                ok = name not in self.failing
                yield name, PreparedTask(TaskCheck(ok=ok, error="" if ok else "boom"))


def test_prepare_stream_yields_each_task_as_it_ends_and_prepare_tasks_keeps_the_task_order(builtin_tasks):
    from rich.console import Console

    tasks = [builtin_tasks["gelu"], builtin_tasks["row_sum"], builtin_tasks["softmax"]]
    backend = StreamingBackend(["softmax", "gelu", "row_sum"], failing={"gelu"})
    options = dict(on_gpu=False, compile_seeds=False, llm=False, earlier={}, has_programs=set(),
                   console=Console(quiet=True))
    pieces = list(prepare_stream(tasks, backend, **options))
    assert pieces[0].tasks == [] and pieces[0].kept_aside == []  # what stays aside comes first
    assert [([t.name for t in p.tasks], [a.task for a in p.set_aside]) for p in pieces[1:]] == \
        [(["softmax"], []), ([], ["gelu"]), (["row_sum"], [])]
    prepared = prepare_tasks(tasks, backend, **options)
    assert [t.name for t in prepared.tasks] == ["row_sum", "softmax"]
    assert [a.task for a in prepared.set_aside] == ["gelu"] and isinstance(prepared.set_aside[0], SetAside)


class SlowEvaluator(TrivialEvaluator):
    def score(self, task_name, task_source, source):
        time.sleep(0.05)  # a budget not spent before the late task's seed is back
        return super().score(task_name, task_source, source)


@pytest.mark.slow
def test_a_task_prepared_during_the_search_joins_it(tmp_path, builtin_tasks):
    """The search starts with gelu; row_sum comes once gelu's first child is evaluated, and is
    searched too (its seed evaluated, children of it made) before the run ends; meanwhile gelu takes
    at most its share of the budget (half of it: one of two tasks)."""
    gelu, row_sum = builtin_tasks["gelu"], builtin_tasks["row_sum"]
    child_evaluated, admitted = threading.Event(), []
    events_file = RunEvents(tmp_path, 12, show=False)

    def events(kind, **fields):
        events_file(kind, **fields)
        if kind == "evaluated" and fields["program"].operator != "seed":
            child_evaluated.set()

    def stream():
        child_evaluated.wait(30)
        time.sleep(1.0)  # long enough for gelu to reach its share
        yield _piece(row_sum)

    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    isl = [Island(i, [TunableConstantMutation()], [1.0], seed=3) for i in range(2)]
    backend = LocalBackend(isl, lambda i: SlowEvaluator(), 1)
    controller = Controller(settings=RunSettings(dir=str(tmp_path), seed=3, budget_evaluations=12),
                            tasks=[gelu], archive=archive, backend=backend,
                            migration=MigrationSettings(interval=0), events=events,
                            arrivals=TaskArrivals(stream(), expected=1), on_arrival=admitted.append)
    try:
        controller.run()
    finally:
        backend.close()
        events_file.close()
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    joined = next(i for i, e in enumerate(lines) if e["event"] == "task_joined")
    assert lines[joined]["task"] == "row_sum" and lines[joined]["tasks"] == 2
    before = [e for e in lines[:joined] if e["event"] == "evaluated" and e["operator"] != "seed"]
    assert 1 <= len(before) <= 6 and all(e["task"] == "gelu" for e in before)
    assert sum(e["event"] == "evaluated" and e["task"] == "row_sum" and e["operator"] != "seed"
               for e in lines) >= 4  # its share once it is in (6 proposals; a duplicate is not evaluated)
    assert [p.tasks for p in admitted] == [[row_sum]]
    assert archive.child_evaluation_count() == 12
    assert lines[-1]["event"] == "done"

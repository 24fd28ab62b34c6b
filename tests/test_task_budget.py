"""run.budget.per_task: at most so many child evaluations per task (evo.loop.task_budget).

The runs use the instant stand-in evaluator (tests.support.llm_server.TrivialEvaluator): they exercise
the run loop's counting, not Triton."""
import json
from collections import Counter, deque

import numpy as np
import pytest

from archive import Archive
from evo.core.errors import ConfigError
from evo.core.program import SEED_OPERATORS, Program
from evo.loop.controller import Controller
from evo.loop.feedback import Feedback
from evo.loop.run_settings import RunSettings
from evo.loop.task_budget import TaskBudget
from evo.views.progress import RunEvents
from islands import Island, LocalBackend, MigrationSettings
from operators import TunableConstantMutation
from operators.sweep import TuningSweep
from tests.support.llm_server import TrivialEvaluator
from tests.test_controller import programs


def run(tmp_path, tasks, *, budget, per_task, resume_count=0):
    """A run over ``tasks`` on 2 islands with the constants operator and a new elite's 8-child sweep,
    as the default config has them; resumed where ``tmp_path`` holds one."""
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    settings = RunSettings(dir=str(tmp_path), seed=3, budget_evaluations=budget, budget_per_task=per_task,
                           sweep_children=8)
    islands = [Island(i, [TunableConstantMutation(), TuningSweep(max_children=8)], [1.0, 0.0], seed=3,
                      stream=resume_count) for i in range(2)]
    backend = LocalBackend(islands, lambda i: TrivialEvaluator(), 1, 2)
    events = RunEvents(tmp_path, budget, show=False)
    controller = Controller(settings=settings, tasks=tasks, archive=archive, backend=backend,
                            migration=MigrationSettings(interval=4, migrants=1), events=events,
                            resume_count=resume_count)
    try:
        controller.run()
    finally:
        backend.close()
        events.close()
    return archive


def children(archive) -> Counter:
    """Evaluated children per task (the budgets' unit)."""
    return Counter(r.task for r in programs(archive)
                   if r.operator not in SEED_OPERATORS and archive.get(r.id).result is not None)


def events(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]


@pytest.fixture
def three_tasks(builtin_tasks):
    return [builtin_tasks["gelu"], builtin_tasks["row_sum"], builtin_tasks["softmax"]]


def test_each_task_gets_exactly_its_cap_when_the_budget_is_larger(tmp_path, three_tasks):
    archive = run(tmp_path, three_tasks, budget=100, per_task=6)
    assert children(archive) == {"gelu": 6, "row_sum": 6, "softmax": 6}
    assert archive.child_evaluation_counts() == {"gelu": 6, "row_sum": 6, "softmax": 6}
    assert archive.pending() == [] and archive.child_evaluation_count() == 18
    operators = Counter(r.operator for r in programs(archive))
    assert operators["sweep"] >= 1, "new elites were swept: their children count against the cap too"
    lines = events(tmp_path)
    assert sorted(e["task"] for e in lines if e["event"] == "task_budget_spent") == ["gelu", "row_sum", "softmax"]
    assert lines[-1]["event"] == "done" and lines[-1]["children_done"] == 18
    assert not any(e["event"] == "stalled" for e in lines), "capped tasks are not failed proposals"


def test_the_global_budget_wins_when_it_is_smaller(tmp_path, three_tasks):
    archive = run(tmp_path, three_tasks, budget=7, per_task=6)
    counts = children(archive)
    assert sum(counts.values()) == 7 and max(counts.values()) <= 6
    assert archive.pending() == [] and events(tmp_path)[-1]["event"] == "done"


def test_a_resumed_run_counts_what_the_archive_holds_against_the_cap(tmp_path, builtin_tasks):
    tasks = [builtin_tasks["gelu"], builtin_tasks["row_sum"]]
    archive = run(tmp_path, tasks, budget=5, per_task=None)  # 5 children over 2 tasks: one has 3 or more
    first = children(archive)
    big, small = sorted(("gelu", "row_sum"), key=lambda t: -first[t])
    assert first[big] >= 3 and first[small] == 5 - first[big]
    # A child of the other task in flight when the run stopped: evaluated on resume, within the cap.
    seed = next(r for r in programs(archive) if r.operator == "seed" and r.task == small)
    orphan = archive.add_program(task=small, island=0, generation=1, operator="constants",
                                 source=seed.source + "\nVARIANT_2 = 2\n", parent_ids=(seed.id,))
    rows_before = {r.id for r in programs(archive) if r.task == big}
    archive.close()
    archive = run(tmp_path, tasks, budget=100, per_task=3, resume_count=1)
    after = children(archive)
    assert after == {big: first[big], small: 3}
    assert archive.get(orphan.id).result is not None
    assert {r.id for r in programs(archive) if r.task == big} == rows_before, \
        "a task at its cap on resume is given no proposal"


@pytest.mark.parametrize("value", [0, -3, 2.5, "20", True])
def test_a_cap_that_is_not_a_whole_number_of_children_is_refused(value):
    with pytest.raises(ValueError, match=r"run.budget.per_task must be an integer >= 1, or null for no cap"):
        RunSettings(dir="unused", budget_per_task=value)


@pytest.mark.parametrize("override", ["run.budget.per_task=0", "run.budget.per_task=-1",
                                      "run.budget.per_task=2.5", "run.budget.per_task=many"])
def test_bad_caps_in_the_config_are_config_errors(override, tmp_path):
    from tests.test_configs import cfg

    from evo.config import build
    with pytest.raises(ConfigError, match=r"run.budget.per_task must be an integer >= 1, or null"):
        build(cfg(f"run.dir={tmp_path}", override))
    assert build(cfg(f"run.dir={tmp_path}", "run.budget.per_task=20")).run.budget_per_task == 20
    assert build(cfg(f"run.dir={tmp_path}")).run.budget_per_task is None


def test_a_capped_tasks_queued_repairs_and_sweeps_are_dropped():
    def program(pid, task):
        return Program(id=pid, task=task, island=0, generation=1, operator="constants", source="")

    feedback = Feedback(None, np.random.default_rng(0), lambda *a, **k: None, 5, sweep_children=2)
    feedback.sweeps.extend([(program(1, "a"), 0), (program(2, "b"), 0), (program(1, "a"), 1)])
    feedback.repairs.extend([program(3, "a"), program(4, "b")])
    budget = TaskBudget(2)
    budget.evaluated.update({"a": 1, "b": 0})
    assert budget.open({"a", "b"}, ["b"], feedback) == {"a", "b"} and len(feedback.sweeps) == 3
    assert budget.open({"a", "b"}, ["a", "b"], feedback) == {"b"}  # a: 1 evaluated, 1 under way
    assert [(p.id, i) for p, i in feedback.sweeps] == [(2, 0)] and [p.id for p in feedback.repairs] == [4]
    assert budget.recorded("a") and not budget.recorded("a")  # True once: when it reaches the cap
    unlimited = TaskBudget(None)
    assert unlimited.open({"a"}, ["a"] * 100, feedback) == {"a"} and unlimited.capped(["a"] * 100) == set()
    assert isinstance(feedback.sweeps, deque)

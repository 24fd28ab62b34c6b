"""The run loop with islands and evaluators in this process (no Ray)."""
import json

import pytest

from archive import Archive
from evaluator import Evaluator, EvaluatorSettings
from evo.loop.controller import Controller
from evo.loop.run_settings import RunSettings
from evo.views.progress import RunEvents
from islands import Island, LocalBackend, MigrationSettings
from operators import TunableConstantMutation
from tests.support.llm_server import TrivialEvaluator


def make_run(tmp_path, tasks, budget, resume_count=0, islands=2):
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    settings = RunSettings(dir=str(tmp_path), seed=3, budget_evaluations=budget)
    isl = [Island(i, [TunableConstantMutation()], [1.0], seed=3, stream=resume_count) for i in range(islands)]
    backend = LocalBackend(isl, lambda i: Evaluator(EvaluatorSettings(device="cpu", timeout_s=60), "cpu"), 1)
    events = RunEvents(tmp_path, budget, show=False)
    controller = Controller(settings=settings, tasks=tasks, archive=archive, backend=backend,
                            migration=MigrationSettings(interval=3, migrants=1), events=events,
                            resume_count=resume_count)
    return controller, archive, backend, events


def run_once(tmp_path, tasks, budget, resume_count=0):
    controller, archive, backend, events = make_run(tmp_path, tasks, budget, resume_count)
    try:
        controller.run()
    finally:
        backend.close()
        events.close()
    return archive


@pytest.fixture
def quick_tasks(builtin_tasks):
    return [builtin_tasks["gelu"], builtin_tasks["row_sum"]]


def programs(archive):
    from sqlalchemy import select

    from archive.models import ProgramRow
    with archive.engine.connect() as c:
        return c.execute(select(ProgramRow.__table__).order_by(ProgramRow.id)).all()


@pytest.mark.slow
def test_run_spends_its_budget_and_keeps_lineage(tmp_path, quick_tasks):
    archive = run_once(tmp_path, quick_tasks, budget=6)
    rows = programs(archive)
    seeds = [r for r in rows if r.operator == "seed"]
    assert len(seeds) == 2 and archive.child_evaluation_count() == 6
    assert archive.pending() == []
    for row in rows:
        if row.operator != "seed":
            assert archive.get(row.id).parent_ids, "every child has a parent"
    for task in ("gelu", "row_sum"):
        stats = archive.stats(task)
        assert stats["correct"] >= 1 and stats["best_speedup"] > 0
        assert archive.elites(task, 0) and archive.elites(task, 1)  # seeds reach every island
    history = archive.stats_history("gelu")
    assert history and history[-1]["children_done"] == 6 and history[-1]["cells"] >= 1
    assert [h["coverage"] for h in history] == sorted(h["coverage"] for h in history)  # cells only fill up
    assert len(archive.stats_history("gelu", island=1)) == len(history)
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("evaluated") == 8
    assert "migrated" in kinds


@pytest.mark.slow
def test_resume_continues_without_reseeding(tmp_path, quick_tasks):
    archive = run_once(tmp_path, quick_tasks, budget=3)
    first = len(programs(archive))
    archive = run_once(tmp_path, quick_tasks, budget=6, resume_count=1)
    rows = programs(archive)
    assert sum(r.operator == "seed" for r in rows) == 2
    assert archive.child_evaluation_count() == 6 and len(rows) > first


@pytest.mark.slow
def test_programs_in_flight_at_a_crash_are_evaluated_on_resume(tmp_path, quick_tasks):
    archive = run_once(tmp_path, quick_tasks, budget=2)
    seed = next(r for r in programs(archive) if r.operator == "seed" and r.task == "gelu")
    orphan = archive.add_program(task="gelu", island=1, generation=1, operator="constants",
                                 source=seed.source.replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 512"),
                                 parent_ids=(seed.id,))
    assert [p.id for p in archive.pending()] == [orphan.id]
    archive = run_once(tmp_path, quick_tasks, budget=3, resume_count=1)
    assert archive.pending() == [] and archive.get(orphan.id).result is not None
    assert archive.child_evaluation_count() == 3


@pytest.mark.slow
def test_zero_budget_only_evaluates_seeds(tmp_path, quick_tasks):
    archive = run_once(tmp_path, quick_tasks, budget=0)
    assert [r.operator for r in programs(archive)] == ["seed", "seed"]


class DyingEvaluator(TrivialEvaluator):
    """The trivial stand-in evaluator, whose actor 'dies' on the first ``deaths`` requests."""

    def __init__(self, deaths: int):
        super().__init__()
        self.deaths, self.calls = deaths, 0

    def score(self, task_name, task_source, source):
        self.calls += 1
        if self.calls <= self.deaths:
            raise RuntimeError("The actor died unexpectedly before finishing this task.")
        return super().score(task_name, task_source, source)


@pytest.mark.parametrize("deaths, crashed, children", [(2, 0, 4), (3, 1, 0)])
def test_work_of_a_dead_evaluator_is_requeued(tmp_path, quick_tasks, deaths, crashed, children):
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    isl = [Island(0, [TunableConstantMutation()], [1.0], seed=3)]
    backend = LocalBackend(isl, lambda i: DyingEvaluator(deaths), 1)
    events = RunEvents(tmp_path, 4, show=False)
    controller = Controller(settings=RunSettings(dir=str(tmp_path), seed=3, budget_evaluations=4),
                            tasks=quick_tasks[:1], archive=archive, backend=backend,
                            migration=MigrationSettings(interval=0), events=events)
    try:
        controller.run()
    finally:
        backend.close()
        events.close()
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "evaluation_lost" for e in lines) == min(deaths, 2)
    statuses = [e["status"] for e in lines if e["event"] == "evaluated"]
    # The seed was in flight when the evaluator died: evaluated again, charged only after 3 deaths
    # (and a crashed seed leaves nothing to search from).
    assert statuses.count("crashed") == crashed and archive.child_evaluation_count() == children
    assert all("in_flight" in e for e in lines if e["event"] == "evaluated")

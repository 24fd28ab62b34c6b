"""A resumed run draws the controller's random stream on from where the last committed change left it."""
import json
import zlib
from concurrent.futures import Future

import pytest
from sqlalchemy import select

from archive import Archive
from archive.models import LineageRow, ProgramRow
from evaluator import EvalResult, Status
from evo.loop.controller import Controller
from evo.loop.loop_state import RNG_META
from evo.loop.run_settings import RunSettings
from islands import MigrationSettings
from operators.base import Proposal
from tests.support import StandInBackend


class Killed(Exception):
    """Stands for SIGKILL: the run loop stops between two committed changes."""


class FakeBackend(StandInBackend):
    """Synchronous islands and evaluator whose answers depend only on what they are given."""

    def __init__(self, kill_at_proposal: int | None = None):
        self.kill_at, self.proposals = kill_at_proposal, 0

    @staticmethod
    def _done(value) -> Future:
        future = Future()
        future.set_result(value)
        return future

    def propose(self, island, context):
        self.proposals += 1
        if self.proposals == self.kill_at:
            raise Killed()
        inspirations = [p.id for p in context.inspirations]
        return self._done(Proposal("fake", f"{context.parent.source}# child of {context.parent.id}, {inspirations}\n"))

    def evaluate(self, slot, task_name, task_source, source):
        return self._done(EvalResult(status=Status.CORRECT, speedup=1 + zlib.crc32(source.encode()) % 1000 / 500))


def run(url, task, budget, backend, resume_count, migration=MigrationSettings(), events=None):
    archive = Archive(url)
    controller = Controller(settings=RunSettings(dir="unused", seed=7, budget_evaluations=budget,
                                                 proposals_per_island=1, inspirations=2),
                            tasks=[task], archive=archive, backend=backend, migration=migration,
                            resume_count=resume_count, events=events or (lambda kind, **fields: None))
    try:
        controller.run()
    finally:
        archive.close()
    return controller


def history(url):
    archive = Archive(url)
    with archive.engine.connect() as c:
        programs = c.execute(select(ProgramRow.id, ProgramRow.source).order_by(ProgramRow.id)).all()
        links = c.execute(select(LineageRow.child_id, LineageRow.parent_id, LineageRow.role)
                          .order_by(LineageRow.child_id, LineageRow.role, LineageRow.parent_id)).all()
    archive.close()
    return [tuple(p) for p in programs], [tuple(link) for link in links]


@pytest.mark.parametrize("kill_at", [3, 6])
def test_killed_and_resumed_run_makes_the_same_choices_as_an_uninterrupted_one(tmp_path, builtin_tasks, kill_at):
    task = builtin_tasks["gelu"]
    whole, broken = f"sqlite:///{tmp_path / 'whole.db'}", f"sqlite:///{tmp_path / 'broken.db'}"
    uninterrupted = run(whole, task, 10, FakeBackend(), resume_count=0)
    with pytest.raises(Killed):
        run(broken, task, 10, FakeBackend(kill_at_proposal=kill_at), resume_count=0)
    resumed = run(broken, task, 10, FakeBackend(), resume_count=1)  # another seed stream, unless restored
    assert history(broken) == history(whole)
    assert resumed.rng.bit_generator.state == uninterrupted.rng.bit_generator.state


def test_the_state_is_saved_with_every_commit_and_restored_at_start(tmp_path, builtin_tasks):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    first = run(url, builtin_tasks["gelu"], 4, FakeBackend(), resume_count=0)
    archive = Archive(url)
    assert json.loads(archive.get_meta(RNG_META)) == first.rng.bit_generator.state
    second = Controller(settings=RunSettings(dir="unused", seed=7), tasks=[builtin_tasks["gelu"]], archive=archive,
                        backend=FakeBackend(), migration=MigrationSettings(), resume_count=1)
    assert second.rng.bit_generator.state != first.rng.bit_generator.state
    second._start()
    assert second.rng.random() == first.rng.random()
    archive.close()


class IslandBackend(FakeBackend):
    """As FakeBackend, but a real island with the offline operator makes the children."""

    def __init__(self, kill_at_proposal: int | None = None, stream: int = 0):
        from islands import Island
        from operators import TunableConstantMutation

        super().__init__(kill_at_proposal)
        self.island = Island(0, [TunableConstantMutation()], [1.0], seed=7, stream=stream)

    def propose(self, island, context):
        self.proposals += 1
        if self.proposals == self.kill_at:
            raise Killed()
        return self._done(self.island.propose(context))


@pytest.mark.parametrize("kill_at", [3, 6])
def test_a_resumed_island_draws_the_same_children(tmp_path, builtin_tasks, kill_at):
    task = builtin_tasks["gelu"]
    whole, broken = f"sqlite:///{tmp_path / 'whole.db'}", f"sqlite:///{tmp_path / 'broken.db'}"
    run(whole, task, 10, IslandBackend(), resume_count=0)
    with pytest.raises(Killed):
        run(broken, task, 10, IslandBackend(kill_at_proposal=kill_at), resume_count=0)
    run(broken, task, 10, IslandBackend(stream=1), resume_count=1)  # a resumed run's island: new stream
    assert history(broken) == history(whole)  # same mutations: proposal numbers seed the islands' RNGs

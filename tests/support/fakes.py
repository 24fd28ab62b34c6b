"""Stand-ins for an evaluator and a backend that implement their whole interface (see tests.support)."""
from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

from evaluator import DerivedSeed, PreparedTask, TaskCheck


def done(value) -> Future:
    future = Future()
    future.set_result(value)
    return future


class StandInEvaluator:
    """``Evaluator``'s interface with no sandbox: :meth:`score` (a subclass's) is the result.  It does
    not race, settles no baselines, accepts every reference and derives no seed."""

    slots = 1
    settings = SimpleNamespace(race=False)

    def evaluate(self, task_name: str, task_source: str, candidate_source: str, race_bar: float | None = None,
                 late_baseline: bool = False):
        return self.score(task_name, task_source, candidate_source)

    def score(self, task_name: str, task_source: str, source: str):
        raise NotImplementedError

    def settled_baselines(self, timeout_s: float = 600.0, ask=None) -> dict:
        return {}

    def check_task(self, task_name: str, task_source: str) -> TaskCheck:
        return TaskCheck(ok=True)

    def compile_seed(self, task_name: str, task_source: str) -> DerivedSeed:
        return DerivedSeed(ok=False, error="a stand-in evaluator derives no seed")

    def prepare_stream(self, tasks):
        return prepared(self, tasks)

    def close(self) -> None:
        pass


def prepared(answers, tasks):
    """Each task's preparation as ``answers``' ``check_task`` and ``compile_seed`` say."""
    for task in tasks:
        yield task.name, PreparedTask(answers.check_task(task.name, task.source),
                                      answers.compile_seed(task.name, task.source) if task.seed else None)


class StandInBackend:
    """The whole of ``islands.backend.Backend`` for a run loop driven in a test: one island, one
    evaluator with one slot, no racing, no baselines, every reference accepted and no seed derived.
    A subclass overrides :meth:`propose` and :meth:`evaluate` (and what else it plays)."""

    island_count = 1
    evaluator_count = 1
    slot_count = 1
    races = False

    def propose(self, island, context) -> Future:
        raise NotImplementedError

    def evaluate(self, slot, task_name, task_source, source, race_bar=None) -> Future:
        raise NotImplementedError

    def settled_baselines(self, ask=None) -> list[dict]:
        return [{} for _ in range(self.evaluator_count)]

    def placement(self) -> None:
        return None

    def check_task(self, task_name, task_source) -> TaskCheck:
        return TaskCheck(ok=True)

    def compile_seed(self, task_name, task_source) -> DerivedSeed:
        return DerivedSeed(ok=False, error="a stand-in backend derives no seed")

    def prepare(self, tasks) -> dict:
        return dict(self.prepare_stream(tasks))

    def prepare_stream(self, tasks):
        return prepared(self, tasks)

    def close(self) -> None:
        pass

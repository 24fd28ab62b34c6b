"""Where islands and evaluators run: in this process (threads) or on Ray.

The controller talks to a backend only through futures, so the same run loop
drives both.  ``LocalBackend`` is for tests and debugging; the Ray backend
(``islands.ray_backend``) is the default for runs.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from evaluator import EvalResult, Evaluator, Preparation
from islands.island import Island
from operators.base import Context, Proposal


class LocalBackend:
    """Islands and evaluators as plain objects driven by a thread pool."""

    def __init__(self, islands: list[Island], make_evaluator: Callable[[int], Evaluator], evaluators: int,
                 proposals_per_island: int = 1):
        self.islands = islands
        self.evaluators = [make_evaluator(i) for i in range(evaluators)]
        self._slots = sum(getattr(e, "slots", 1) for e in self.evaluators)  # every evaluator's pipeline, and one
        # Proposals mostly wait on LLM replies: one thread for each proposal the run loop keeps in flight.
        self._proposal_pool = ThreadPoolExecutor(max_workers=len(islands) * max(1, proposals_per_island),
                                                 thread_name_prefix="evo-propose")
        self._pool = ThreadPoolExecutor(max_workers=self._slots + evaluators, thread_name_prefix="evo-eval")

    @property
    def island_count(self) -> int:
        return len(self.islands)

    @property
    def evaluator_count(self) -> int:
        """Evaluation slots: every evaluator's pipeline and one waiting (slot ``n`` is on evaluator ``n % count``)."""
        return self._slots

    def propose(self, island: int, context: Context) -> Future[Proposal]:
        return self._proposal_pool.submit(self.islands[island].propose, context)

    @property
    def races(self) -> bool:
        """The evaluators take a race bar (a child's parent's speedup) with each candidate."""
        return all(isinstance(e, Evaluator) and e.settings.race for e in self.evaluators)

    def evaluate(self, worker: int, task_name: str, task_source: str, source: str,
                 race_bar: float | None = None) -> Future[EvalResult]:
        evaluator = self.evaluators[worker % len(self.evaluators)]
        if race_bar is None:
            return self._pool.submit(evaluator.evaluate, task_name, task_source, source)
        return self._pool.submit(evaluator.evaluate, task_name, task_source, source, race_bar)

    def check_task(self, task_name: str, task_source: str) -> dict:
        return self.evaluators[0].check_task(task_name, task_source)

    def compile_seed(self, task_name: str, task_source: str) -> dict:
        return self.evaluators[0].compile_seed(task_name, task_source)

    def prepare(self, tasks: list[Preparation]) -> dict[str, dict]:
        """Every task's reference checked and its seed derived if asked, spread over the evaluators
        (each preparing several tasks at once): ``{name: {"check", "seed"}}``."""
        shares = [tasks[i::len(self.evaluators)] for i in range(len(self.evaluators))]
        futures = [self._pool.submit(e.prepare, share, e.prepare_workers)
                   for e, share in zip(self.evaluators, shares) if share]
        return {name: outcome for f in futures for name, outcome in f.result().items()}

    def close(self) -> None:
        self._proposal_pool.shutdown(wait=True, cancel_futures=True)
        self._pool.shutdown(wait=True, cancel_futures=True)
        for evaluator in self.evaluators:
            evaluator.close()

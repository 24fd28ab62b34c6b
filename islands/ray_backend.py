"""Islands and evaluators as Ray actors: the only module that imports Ray.

Without ``ray.address`` the engine starts a private local Ray; with one it
joins that cluster.  Island actors take no CPU reservation (they wait on LLMs
and on the controller) and serve ``proposals_per_island`` proposals at once
(threaded actors); each evaluator reserves one GPU, or one CPU when
evaluating on the CPU.
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import Future
from dataclasses import dataclass

from evaluator import EvalResult, Evaluator, EvaluatorSettings
from islands.island import Island
from operators.base import Context, Proposal


@dataclass(frozen=True)
class RaySettings:
    address: str | None = None  # None: start a local Ray; "auto" or host:port: join a cluster
    num_cpus: int | None = None  # for a local Ray only
    object_store_memory: int = 256 * 1024 * 1024


class RayBackend:
    def __init__(self, settings: RaySettings, islands: list[Island], evaluator_settings: EvaluatorSettings,
                 device: str, evaluators: int, proposals_per_island: int = 1):
        import ray

        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            options = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                           configure_logging=True)
            if settings.address:
                ray.init(address=settings.address, **options)
            else:
                cpus = settings.num_cpus or max(os.cpu_count() or 1, evaluators + 1)
                ray.init(num_cpus=cpus, object_store_memory=settings.object_store_memory, **options)
            self._started = True
        island_actor = ray.remote(Island).options(num_cpus=0, max_restarts=3, max_task_retries=0,
                                                  max_concurrency=max(1, proposals_per_island))
        # The actor rebuilds the island from the same arguments, so it draws the same RNG stream.
        self.islands = [island_actor.remote(i.index, i.operators, list(i.weights), i.seed, i.stream,
                                            i.descriptors) for i in islands]
        resources = {"num_gpus": 1} if device == "cuda" else {"num_cpus": 1}
        evaluator_actor = ray.remote(Evaluator).options(max_restarts=3, **resources)
        self.evaluators = [evaluator_actor.remote(evaluator_settings, device) for _ in range(evaluators)]

    @property
    def island_count(self) -> int:
        return len(self.islands)

    @property
    def evaluator_count(self) -> int:
        return len(self.evaluators)

    def propose(self, island: int, context: Context) -> Future[Proposal]:
        return self.islands[island].propose.remote(context).future()

    def evaluate(self, worker: int, task_name: str, task_source: str, source: str) -> Future[EvalResult]:
        return self.evaluators[worker].evaluate.remote(task_name, task_source, source).future()

    def check_task(self, task_name: str, task_source: str) -> dict:
        return self._ray.get(self.evaluators[0].check_task.remote(task_name, task_source))

    def close(self) -> None:
        try:
            self._ray.get([e.close.remote() for e in self.evaluators], timeout=30)
        except Exception:  # actors may already be gone; Ray cleans up their processes
            pass
        if self._started:
            self._ray.shutdown()

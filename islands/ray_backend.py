"""Islands and evaluators as Ray actors: the only module that imports Ray.

Without ``ray.address`` the engine starts a private local Ray; with one it
joins that cluster.  Island actors reserve only a sliver of a CPU (they wait on
LLMs and on the controller), in a placement group that spreads them over the
nodes, and serve ``proposals_per_island`` proposals at once (threaded actors);
each evaluator reserves one GPU, or one CPU when evaluating on the CPU.
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import Future
from dataclasses import dataclass

from evaluator import EvalResult, Evaluator, EvaluatorSettings, Preparation
from islands.island import Island
from operators.base import Context, Proposal


@dataclass(frozen=True)
class RaySettings:
    address: str | None = None  # None: start a local Ray; "auto" or host:port: join a cluster
    num_cpus: int | None = None  # for a local Ray only
    object_store_memory: int = 256 * 1024 * 1024
    spread: bool = True  # place islands and evaluators over as many nodes as possible


ISLAND_CPU = 0.01  # islands wait on LLMs and the run loop; this sliver only places them


def _init(ray, settings: RaySettings, local_cpus: int) -> bool:
    """Join the configured cluster, or start a private local Ray; True if this call started it."""
    if ray.is_initialized():
        return False
    options = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                   configure_logging=True)
    if settings.address:
        ray.init(address=settings.address, **options)
    else:
        ray.init(num_cpus=settings.num_cpus or local_cpus, object_store_memory=settings.object_store_memory,
                 **options)
    return True


def cluster_gpus(settings: RaySettings) -> int:
    """GPUs of the whole cluster that ``ray.address`` names (joined now, and kept for the backend)."""
    import ray

    _init(ray, settings, 1)
    return int(ray.cluster_resources().get("GPU", 0))


def _spread_islands(ray, count: int):
    """A placement group of one tiny bundle per island, spread over the nodes (None if it can't be had).

    Ray places zero-resource actors where it likes (usually the driver's node);
    bundles of a SPREAD placement group land on different nodes, and are moved
    to a live node if theirs dies, so restarted islands find a home.
    """
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"CPU": ISLAND_CPU}] * count, strategy="SPREAD")
    try:
        ray.get(group.ready(), timeout=60)
    except Exception:  # e.g. a cluster without a free sliver of CPU: unplaced islands still work
        remove_placement_group(group)
        return None
    return group


def _node_of(actor) -> str:
    return actor.__ray_call__.remote(lambda self: __import__("ray").get_runtime_context().get_node_id())


class RayBackend:
    def __init__(self, settings: RaySettings, islands: list[Island], evaluator_settings: EvaluatorSettings,
                 device: str, evaluators: int, proposals_per_island: int = 1):
        import ray

        self._ray = ray
        # Disconnect on close from a cluster this backend joined, or stop the Ray it started.
        self._started = _init(ray, settings, max(os.cpu_count() or 1, evaluators + 1)) or bool(settings.address)
        self._group = _spread_islands(ray, len(islands)) if settings.spread else None
        self._concurrency = max(1, proposals_per_island)
        island_actor, evaluator_actor = ray.remote(Island), ray.remote(Evaluator)
        # The actor rebuilds the island from the same arguments, so it draws the same RNG stream.
        self.islands = [island_actor.options(max_restarts=3, max_task_retries=0, max_concurrency=self._concurrency,
                                             **self._island_place(n))
                        .remote(i.index, i.operators, list(i.weights), i.seed, i.stream, i.descriptors,
                                i.requests)
                        for n, i in enumerate(islands)]
        # One evaluator per GPU (or CPU), wherever those are in the cluster.
        resources = {"num_gpus": 1} if device == "cuda" else {"num_cpus": 1}
        spread = {"scheduling_strategy": "SPREAD"} if settings.spread else {}
        self.evaluators = [evaluator_actor.options(max_restarts=3, **resources, **spread)
                           .remote(evaluator_settings, device) for _ in range(evaluators)]

    def _island_place(self, n: int) -> dict:
        if self._group is None:
            return {"num_cpus": 0}
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {"num_cpus": ISLAND_CPU, "scheduling_strategy": PlacementGroupSchedulingStrategy(
            self._group, placement_group_bundle_index=n)}

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

    def placement(self) -> dict:
        """The Ray node of every island and evaluator actor."""
        ray = self._ray
        return {"islands": ray.get([_node_of(a) for a in self.islands]),
                "evaluators": ray.get([_node_of(a) for a in self.evaluators]),
                "nodes": sum(1 for n in ray.nodes() if n["Alive"])}

    def check_task(self, task_name: str, task_source: str) -> dict:
        return self._ray.get(self.evaluators[0].check_task.remote(task_name, task_source))

    def compile_seed(self, task_name: str, task_source: str) -> dict:
        return self._ray.get(self.evaluators[0].compile_seed.remote(task_name, task_source))

    def prepare(self, tasks: list[Preparation]) -> dict[str, dict]:
        """As :meth:`islands.backend.LocalBackend.prepare`, on the evaluator actors."""
        shares = [tasks[i::len(self.evaluators)] for i in range(len(self.evaluators))]
        refs = [e.prepare_here.remote(share) for e, share in zip(self.evaluators, shares) if share]
        return {name: outcome for reply in self._ray.get(refs) for name, outcome in reply.items()}

    def close(self) -> None:
        try:
            self._ray.get([e.close.remote() for e in self.evaluators], timeout=30)
        except Exception:  # actors may already be gone; Ray cleans up their processes
            pass
        if self._group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self._group)
            except Exception:  # the cluster may be going away already
                pass
        if self._started:
            self._ray.shutdown()

"""Islands and evaluators as Ray actors: the only module that imports Ray.

Without ``ray.address`` the engine starts a private local Ray, even where a
Ray cluster runs on the machine (it says so); with one it joins that cluster,
or says in one line why it cannot (islands/ray_diagnostics.py).  Island actors
wait on LLMs and on the controller: they reserve no CPU or GPU, only a sliver
of memory in a placement group that spreads them over the nodes, so they never
take what an evaluator needs; they serve ``proposals_per_island`` proposals at
once (threaded actors).  Each evaluator reserves one GPU, or one CPU when
evaluating on the CPU.  Actors that do not start are reported every
``placement_report_s`` (what they ask for, what each node has free) and the
run gives up after ``placement_timeout_s``.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterator

from evaluator import DerivedSeed, EvalResult, Evaluator, EvaluatorSettings, Preparation, PreparedTask, TaskCheck
from evaluator.evaluator import evaluation_slots
from islands.backend import merged
from islands.island import Island
from islands.ray_diagnostics import ClusterError, Waiting, gave_up, held_stderr, join_failure, private_ray_note, \
    probe, waiting_report
from operators.base import Context, Proposal


@dataclass(frozen=True)
class RaySettings:
    address: str | None = None  # None: start a local Ray; "auto" or host:port: join a cluster
    num_cpus: int | None = None  # for a local Ray only
    object_store_memory: int = 256 * 1024 * 1024
    spread: bool = True  # place islands and evaluators over as many nodes as possible
    placement_report_s: float = 30.0  # actors not started after this long are reported (and again as long)
    placement_timeout_s: float = 600.0  # the run gives up on actors not started by then

    def __post_init__(self):
        if self.placement_report_s <= 0 or self.placement_timeout_s <= 0:
            raise ValueError("ray.placement_report_s and ray.placement_timeout_s must be > 0")


# Islands wait on LLMs and the run loop: their bundles hold this much memory, no CPU or GPU, so an
# island never takes a CPU share that an evaluator on the same node needs whole.
ISLAND_MEMORY = 1 << 20


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _running_cluster() -> str | None:
    """The address of a Ray cluster this machine points at (RAY_ADDRESS, or the last `ray start`)."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    try:
        from ray._private.utils import read_ray_address

        return read_ray_address()
    except Exception:  # noqa: BLE001 (Ray's private helper moved: nothing to say then)
        return None


def _init(ray, settings: RaySettings, local_cpus: int, report: Callable[[str], None] = _say) -> bool:
    """Join the configured cluster, or start a private local Ray; True if this call started it."""
    if ray.is_initialized():
        return False
    options = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                   configure_logging=True)
    if settings.address:
        unreachable = probe(settings.address)
        if unreachable:
            raise ClusterError(f"cannot join the Ray cluster at {settings.address}: {unreachable}")
        try:
            with held_stderr() as held:  # Ray's C++ client warns every second while it retries a refused token
                ray.init(address=settings.address, **options)
        except Exception as exc:  # noqa: BLE001 (whatever Ray raises, the user gets one line)
            raise ClusterError(join_failure(settings.address, exc, os.environ.get("RAY_AUTH_MODE"))) from None
        held.replay()
    else:
        existing = _running_cluster()
        # "local": a new Ray of our own, never the cluster that RAY_ADDRESS or a `ray start` names.
        ray.init(address="local", num_cpus=settings.num_cpus or local_cpus,
                 object_store_memory=settings.object_store_memory, **options)
        if existing:
            report(private_ray_note(existing))
    return True


def cluster_gpus(settings: RaySettings) -> int:
    """GPUs of the whole cluster that ``ray.address`` names (joined now, and kept for the backend)."""
    import ray

    _init(ray, settings, 1)
    return int(ray.cluster_resources().get("GPU", 0))


def _spread_islands(ray, count: int, wait_s: float, report: Callable[[str], None]):
    """A placement group of one tiny bundle per island, spread over the nodes (None if it can't be had).

    Ray places zero-resource actors where it likes (usually the driver's node);
    bundles of a SPREAD placement group land on different nodes, and are moved
    to a live node if theirs dies, so restarted islands find a home.
    """
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"memory": ISLAND_MEMORY}] * count, strategy="SPREAD")
    try:
        ray.get(group.ready(), timeout=wait_s)
    except Exception:  # e.g. a cluster without a free MiB of memory: unplaced islands still work
        remove_placement_group(group)
        report(f"Ray: the islands' placement group ({count} bundles of 1 MiB of memory) found no place in "
               f"{wait_s:.0f} s: the islands go where Ray puts them")
        return None
    return group


def _node_of(actor) -> str:
    return actor.__ray_call__.remote(lambda self: __import__("ray").get_runtime_context().get_node_id())


class RayBackend:
    """Islands and evaluators as Ray actors, wherever the cluster has room (a :class:`islands.backend.Backend`)."""

    def __init__(self, settings: RaySettings, islands: list[Island], evaluator_settings: EvaluatorSettings,
                 device: str, evaluators: int, proposals_per_island: int = 1,
                 report: Callable[[str], None] = _say):
        import ray

        self._ray = ray
        # Disconnect on close from a cluster this backend joined, or stop the Ray it started.
        self._started = _init(ray, settings, max(os.cpu_count() or 1, evaluators + 1), report) \
            or bool(settings.address)
        self._group = _spread_islands(ray, len(islands), settings.placement_report_s, report) \
            if settings.spread else None
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
        # Each actor serves its slots' evaluations at once (threads: its pipeline, each timed alone on
        # its GPU, and one waiting for a worker), and a call beside them (preparation, status).
        self._slots = evaluation_slots(evaluator_settings.on(device).pipeline)
        self._races = evaluator_settings.race
        self.evaluators = [evaluator_actor.options(max_restarts=3, max_concurrency=self._slots + 1, **resources,
                                                   **spread).remote(evaluator_settings, device)
                           for _ in range(evaluators)]
        asks = {"GPU": 1.0} if device == "cuda" else {"CPU": 1.0}
        self._asks = {**{f"island {n}": self._island_asks() for n in range(len(self.islands))},
                      **{f"evaluator {n}": asks for n in range(len(self.evaluators))}}
        try:
            self._nodes = self._await_actors(settings, report)
        except BaseException:
            self.close()
            raise

    def _island_place(self, n: int) -> dict:
        if self._group is None:
            return {"num_cpus": 0}
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {"num_cpus": 0, "memory": ISLAND_MEMORY, "scheduling_strategy": PlacementGroupSchedulingStrategy(
            self._group, placement_group_bundle_index=n)}

    def _island_asks(self) -> dict[str, float]:
        return {"memory": float(ISLAND_MEMORY)} if self._group is not None else {}

    def _await_actors(self, settings: RaySettings, report: Callable[[str], None]) -> dict[str, str]:
        """Wait until every actor runs; report those that do not every ``placement_report_s`` and
        give up after ``placement_timeout_s``.  Returns each actor's node."""
        ray = self._ray
        actors = {**{f"island {n}": a for n, a in enumerate(self.islands)},
                  **{f"evaluator {n}": a for n, a in enumerate(self.evaluators)}}
        pending = {_node_of(actor): name for name, actor in actors.items()}
        nodes: dict[str, str] = {}
        began = time.monotonic()
        next_report = began + settings.placement_report_s
        while pending:
            now = time.monotonic()
            wake = min(next_report, began + settings.placement_timeout_s)
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=max(0.0, wake - now))
            for ref in ready:
                nodes[pending.pop(ref)] = ray.get(ref)  # an actor whose constructor failed raises here
            if not pending:
                break
            now = time.monotonic()
            if now >= began + settings.placement_timeout_s:
                waiting = self._waiting({name: actors[name] for name in pending.values()})
                raise ClusterError(gave_up(waiting, self._node_resources(), now - began))
            if now >= next_report:
                report(waiting_report(self._waiting({name: actors[name] for name in pending.values()}),
                                      self._node_resources(), now - began))
                next_report += settings.placement_report_s
        return nodes

    def _waiting(self, actors: dict) -> list[Waiting]:
        """The actors not started, each placed (its process starting) or waiting for resources."""
        try:
            from ray._private.state import actors as actor_table

            table = actor_table()
        except Exception:  # noqa: BLE001 (Ray's private table moved: say what each asks for anyway)
            table = {}
        out = []
        for name, actor in actors.items():
            row = table.get(actor._actor_id.hex(), {})
            out.append(Waiting(name, self._asks[name], placed=bool(row.get("Pid"))))
        return out

    def _node_resources(self) -> dict[str, dict[str, dict[str, float]]]:
        ray = self._ray
        try:
            from ray._private.state import state

            free = state.available_resources_per_node()
        except Exception:  # noqa: BLE001
            free = {}
        return {n["NodeID"]: {"total": dict(n["Resources"]), "free": dict(free.get(n["NodeID"], {}))}
                for n in ray.nodes() if n["Alive"]}

    @property
    def island_count(self) -> int:
        return len(self.islands)

    @property
    def evaluator_count(self) -> int:
        return len(self.evaluators)

    @property
    def slot_count(self) -> int:
        return len(self.evaluators) * self._slots

    def propose(self, island: int, context: Context) -> Future[Proposal]:
        return self.islands[island].propose.remote(context).future()

    @property
    def races(self) -> bool:
        """The evaluators take a race bar (a child's parent's speedup) with each candidate."""
        return self._races

    def evaluate(self, slot: int, task_name: str, task_source: str, source: str,
                 race_bar: float | None = None) -> Future[EvalResult]:
        return self.evaluators[slot % len(self.evaluators)].evaluate.remote(
            task_name, task_source, source, race_bar, late_baseline=True).future()

    def settled_baselines(self, ask: list[dict[str, str]] | None = None) -> list[dict[str, dict]]:
        """As :meth:`islands.backend.LocalBackend.settled_baselines`, of the evaluator actors (an actor
        lost meanwhile gives none)."""
        ask = ask or [{}] * len(self.evaluators)
        refs = [e.settled_baselines.remote(ask=a) for e, a in zip(self.evaluators, ask)]
        settled = []
        for ref in refs:
            try:
                settled.append(self._ray.get(ref, timeout=660))
            except Exception:  # noqa: BLE001 (the actor or its node is gone): those rows keep no figure
                settled.append({})
        return settled

    def placement(self) -> dict:
        """The Ray node of every island and evaluator actor (where each started)."""
        return {"islands": [self._nodes[f"island {n}"] for n in range(len(self.islands))],
                "evaluators": [self._nodes[f"evaluator {n}"] for n in range(len(self.evaluators))],
                "nodes": sum(1 for n in self._ray.nodes() if n["Alive"])}

    def check_task(self, task_name: str, task_source: str) -> TaskCheck:
        return self._ray.get(self.evaluators[0].check_task.remote(task_name, task_source))

    def compile_seed(self, task_name: str, task_source: str) -> DerivedSeed:
        return self._ray.get(self.evaluators[0].compile_seed.remote(task_name, task_source))

    def prepare(self, tasks: list[Preparation]) -> dict[str, PreparedTask]:
        """As :meth:`islands.backend.LocalBackend.prepare`, on the evaluator actors."""
        return dict(self.prepare_stream(tasks))

    def prepare_stream(self, tasks: list[Preparation]) -> Iterator[tuple[str, PreparedTask]]:
        """As :meth:`islands.backend.LocalBackend.prepare_stream`: each actor's outcomes streamed
        (a Ray generator) as its workers finish them."""
        shares = [tasks[i::len(self.evaluators)] for i in range(len(self.evaluators))]

        def stream(evaluator, share):
            for ref in evaluator.prepare_stream.remote(share):  # a generator: streamed by Ray
                yield self._ray.get(ref)

        return merged([partial(stream, e, share) for e, share in zip(self.evaluators, shares) if share])

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

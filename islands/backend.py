"""Where islands and evaluators run: in this process (threads) or on Ray.

The controller talks to a backend only through :class:`Backend` and futures, so the same run loop
drives both.  ``LocalBackend`` is for tests and debugging; the Ray backend
(``islands.ray_backend``) is the default for runs.

An *evaluation slot* is one evaluation the run loop may have under way: each evaluator (one per GPU)
serves ``Evaluator.slots`` of them at once (its pipeline, and one waiting for a worker), and slot
``n`` is on evaluator ``n % evaluator_count``.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Callable, Iterable, Iterator, Protocol, runtime_checkable

from evaluator import DerivedSeed, EvalResult, Evaluator, Preparation, PreparedTask, TaskCheck
from islands.island import Island
from operators.base import Context, Proposal


@runtime_checkable
class Backend(Protocol):
    """What the run loop and the run's start-up ask of the islands and evaluators, wherever they run."""

    @property
    def island_count(self) -> int: ...

    @property
    def evaluator_count(self) -> int:
        """Evaluators: one per GPU (or one on the CPU)."""

    @property
    def slot_count(self) -> int:
        """Evaluation slots, over all evaluators."""

    @property
    def races(self) -> bool:
        """The evaluators take a race bar (a child's parent's speedup) with each candidate."""

    def propose(self, island: int, context: Context) -> Future[Proposal]: ...

    def evaluate(self, slot: int, task_name: str, task_source: str, source: str,
                 race_bar: float | None = None) -> Future[EvalResult]: ...

    def settled_baselines(self, ask: list[dict[str, str]] | None = None) -> list[dict[str, dict]]:
        """Each evaluator's torch.compile baselines, ``{task: {"ratio"} or {"error"}}``, those still
        measured awaited: for results that came back before their task's (``late_baseline``).
        ``ask[i]`` (``{task: source}``): tasks evaluator ``i`` measures first where it has not."""

    def placement(self) -> dict | None:
        """Where each island and evaluator runs (nodes of a cluster); None where all run in this process."""

    def check_task(self, task_name: str, task_source: str) -> TaskCheck: ...

    def compile_seed(self, task_name: str, task_source: str) -> DerivedSeed: ...

    def prepare(self, tasks: list[Preparation]) -> dict[str, PreparedTask]: ...

    def prepare_stream(self, tasks: list[Preparation]) -> Iterator[tuple[str, PreparedTask]]: ...

    def close(self) -> None: ...


class LocalBackend:
    """Islands and evaluators as plain objects driven by a thread pool (a :class:`Backend`)."""

    def __init__(self, islands: list[Island], make_evaluator: Callable[[int], Evaluator], evaluators: int,
                 proposals_per_island: int = 1):
        self.islands = islands
        self.evaluators = [make_evaluator(i) for i in range(evaluators)]
        self._slots = sum(e.slots for e in self.evaluators)  # every evaluator's pipeline, and one waiting
        # Proposals mostly wait on LLM replies: one thread for each proposal the run loop keeps in flight.
        self._proposal_pool = ThreadPoolExecutor(max_workers=len(islands) * max(1, proposals_per_island),
                                                 thread_name_prefix="evo-propose")
        self._pool = ThreadPoolExecutor(max_workers=self._slots + evaluators, thread_name_prefix="evo-eval")

    @property
    def island_count(self) -> int:
        return len(self.islands)

    @property
    def evaluator_count(self) -> int:
        return len(self.evaluators)

    @property
    def slot_count(self) -> int:
        return self._slots

    def propose(self, island: int, context: Context) -> Future[Proposal]:
        return self._proposal_pool.submit(self.islands[island].propose, context)

    @property
    def races(self) -> bool:
        return all(e.settings.race for e in self.evaluators)

    def evaluate(self, slot: int, task_name: str, task_source: str, source: str,
                 race_bar: float | None = None) -> Future[EvalResult]:
        evaluator = self.evaluators[slot % len(self.evaluators)]
        return self._pool.submit(evaluator.evaluate, task_name, task_source, source, race_bar, late_baseline=True)

    def settled_baselines(self, ask: list[dict[str, str]] | None = None) -> list[dict[str, dict]]:
        ask = ask or [{}] * len(self.evaluators)
        with ThreadPoolExecutor(len(self.evaluators)) as pool:  # each evaluator measures its own at once
            return list(pool.map(lambda e, a: e.settled_baselines(ask=a), self.evaluators, ask))

    def placement(self) -> None:
        return None

    def check_task(self, task_name: str, task_source: str) -> TaskCheck:
        return self.evaluators[0].check_task(task_name, task_source)

    def compile_seed(self, task_name: str, task_source: str) -> DerivedSeed:
        return self.evaluators[0].compile_seed(task_name, task_source)

    def prepare(self, tasks: list[Preparation]) -> dict[str, PreparedTask]:
        """Every task's reference checked and its seed derived if asked, spread over the evaluators
        (each preparing several tasks at once), by name."""
        return dict(self.prepare_stream(tasks))

    def prepare_stream(self, tasks: list[Preparation]) -> Iterator[tuple[str, PreparedTask]]:
        """:meth:`prepare`, each task's ``(name, outcome)`` as soon as it is known."""
        shares = [tasks[i::len(self.evaluators)] for i in range(len(self.evaluators))]
        return merged([partial(e.prepare_stream, share) for e, share in zip(self.evaluators, shares) if share])

    def close(self) -> None:
        """Queued work cancelled, then the evaluators closed before their threads are awaited: an
        evaluation under way ends with its worker (a run stopped mid-search does not wait minutes for
        it; the run's resume evaluates it again)."""
        self._proposal_pool.shutdown(wait=False, cancel_futures=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for evaluator in self.evaluators:
            evaluator.close()
        self._pool.shutdown(wait=True)
        self._proposal_pool.shutdown(wait=True)


def merged(streams: list[Callable[[], Iterable]]) -> Iterator:
    """The items of several streams (each started by calling it, and read in a thread of its own) in
    the order they come; an exception in one is raised here once the others have ended."""
    items: queue.SimpleQueue = queue.SimpleQueue()
    ended = object()

    def read(stream: Callable[[], Iterable]) -> None:
        try:
            for item in stream():
                items.put((True, item))
        except BaseException as exc:  # noqa: BLE001 (raised in the reader's thread)
            items.put((False, exc))
        finally:
            items.put((False, ended))

    for stream in streams:
        threading.Thread(target=read, args=(stream,), daemon=True, name="evo-prepare-stream").start()
    left, failure = len(streams), None
    while left:
        ok, item = items.get()
        if ok:
            yield item
        elif item is ended:
            left -= 1
        else:
            failure = failure or item
    if failure is not None:
        raise failure

"""Tasks that join a run while it searches: the rest of a start-up's preparation.

On a GPU a run starts searching as soon as its first task is ready (its
reference checked, its seed derived) instead of after every task's
preparation: deriving seeds from torch.compile takes tens of seconds a task,
minutes for a folder of problems.  The rest of the preparation (an iterator of
``evo.loop.startup.Prepared``, one per task) is read here in a thread of its own;
the run loop waits on :meth:`TaskArrivals.waiting` beside its other futures and
takes what came with :meth:`TaskArrivals.take`, on its own thread, so that the
archive keeps one writer.
"""
from __future__ import annotations

import math
import threading
from collections import Counter
from concurrent.futures import Future
from typing import Iterator

from evo.loop.startup import Prepared


class TaskArrivals:
    """``stream``: the preparation's pieces still to come, one per task (``expected`` of them)."""

    def __init__(self, stream: Iterator[Prepared], expected: int = 0):
        self.expected = expected  # tasks whose preparation has not been taken yet
        self._share: int | None = None  # children per task while tasks are still to come
        self._started: Counter = Counter()  # children proposed per task meanwhile
        self._lock = threading.Lock()
        self._came: list[Prepared] = []
        self._ended = False
        self._failure: BaseException | None = None
        self._signal: Future = Future()  # done once something came (or the stream ended)
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True, name="evo-arrivals")
        self._thread.start()

    def _read(self, stream: Iterator[Prepared]) -> None:
        try:
            for piece in stream:
                with self._lock:
                    self._came.append(piece)
                    self._tell()
        except BaseException as exc:  # noqa: BLE001 (raised on the run loop's thread by take)
            with self._lock:
                self._failure = exc
        finally:
            with self._lock:
                self._ended = True
                self._tell()

    def _tell(self) -> None:
        if not self._signal.done():
            self._signal.set_result(None)

    @property
    def open(self) -> bool:
        """More may come, or has come and was not taken yet."""
        with self._lock:
            return not self._ended or bool(self._came) or self._failure is not None

    def waiting(self) -> Future | None:
        """A future done once there is something to take; None when nothing more can come."""
        with self._lock:
            if self._ended and not self._came and self._failure is None:
                return None
            return self._signal

    def take(self) -> list[Prepared]:
        """What came since the last call (the preparation's failure, if it failed, is raised here)."""
        with self._lock:
            came, self._came = self._came, []
            failure = None if came else self._failure  # what came before the failure first
            if failure is not None:
                self._failure = None
            if self._signal.done() and not self._ended:
                self._signal = Future()
        if failure is not None:
            raise failure
        self.expected = max(0, self.expected - len(came))
        return came

    def searchable(self, ready: set[str], tasks: int, budget_left: int, seeds_pending: bool) -> set[str]:
        """The ready tasks a child may be proposed for now.  Once tasks are to come, each takes its share
        of the budget left then (``tasks`` in the search and those to come) before any takes more, so
        that a short run does not spend its budget on the first tasks prepared: the tasks under their
        share, else none while more may come (tasks, or the seeds of those that came), else all."""
        if self._share is None:
            if not self.expected:
                return ready
            self._share = max(1, math.ceil(budget_left / (tasks + self.expected)))
        under = {task for task in ready if self._started[task] < self._share}
        if under:
            return under
        return set() if self.expected or seeds_pending else ready

    def started(self, task: str) -> None:
        """A child of ``task`` proposed (counted against its share while tasks are still to come)."""
        self._started[task] += 1

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

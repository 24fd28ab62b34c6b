"""Tasks that join a run while it searches: the rest of a start-up's preparation.

On a GPU a run starts searching as soon as its first task is ready (its
reference checked, its seed derived) instead of after every task's
preparation: deriving seeds from torch.compile takes tens of seconds a task,
minutes for a folder of problems.  The rest of the preparation (an iterator of
``evo.startup.Prepared``, one per task) is read here in a thread of its own;
the run loop waits on :meth:`TaskArrivals.waiting` beside its other futures and
takes what came with :meth:`TaskArrivals.take`, on its own thread, so that the
archive keeps one writer.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Iterator

from evo.startup import Prepared


class TaskArrivals:
    def __init__(self, stream: Iterator[Prepared]):
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
        return came

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

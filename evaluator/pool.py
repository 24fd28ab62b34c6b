"""The pipeline's sandbox workers on one device: an evaluation takes a free one, and work that must
have the device to itself takes them all."""
from __future__ import annotations

import queue
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from evaluator.sandbox import SandboxWorker


class WorkerPool:
    def __init__(self, make_worker: Callable[[], SandboxWorker], size: int):
        self.workers = [make_worker() for _ in range(size)]
        self._idle: queue.SimpleQueue[SandboxWorker] = queue.SimpleQueue()
        self._draining = threading.Lock()  # held to take a worker, and to take them all
        for worker in self.workers:
            self._idle.put(worker)

    def take(self) -> SandboxWorker:
        """A free worker, waiting for one (and while :meth:`all` is draining them)."""
        with self._draining:
            return self._idle.get()

    def give(self, worker: SandboxWorker) -> None:
        self._idle.put(worker)

    @contextmanager
    def one(self) -> Iterator[SandboxWorker]:
        worker = self.take()
        try:
            yield worker
        finally:
            self.give(worker)

    @contextmanager
    def all(self) -> Iterator[None]:
        """Every worker held for the block: each evaluation under way finished first, none started."""
        with self._draining:  # evaluations not yet started wait here
            held = [self._idle.get() for _ in self.workers]
        try:
            yield
        finally:
            for worker in held:
                self._idle.put(worker)

    def idle(self) -> int:
        return self._idle.qsize()

    def close(self) -> None:
        for worker in self.workers:
            worker.close()

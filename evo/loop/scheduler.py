"""Evaluations in flight: which programs wait, which evaluator runs which, and what comes back.

The run loop decides *what* to evaluate (its search policy); this module decides *when and where*:
programs wait in order, an idle evaluation slot takes the next one, a slot whose evaluator died has
its program evaluated again (a few times at most), and a program's source is known to be under way
until its result is recorded, so a duplicate proposal is refused.  Plain Python: the backend's
``evaluate`` is passed in as ``submit``.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from typing import Callable

from evo.core.program import Program
from evo.loop.pacing import Pacing

MAX_LOST_EVALUATIONS = 2  # a program whose evaluator dies more often than this is charged with a crash

Submit = Callable[[int, Program], Future]


class EvaluationQueue:
    """Programs waiting for an evaluation slot, programs being evaluated, and the idle slots."""

    def __init__(self, slots: int, pacing: Pacing):
        self.pacing = pacing
        self._waiting: deque[Program] = deque()
        self._running: dict[Future, tuple[int, Program]] = {}
        self._idle: deque[int] = deque(range(slots))
        self._sources: set[tuple[str, str]] = set()  # (task, source hash) queued or running
        self._lost: dict[int, int] = {}  # program id -> evaluator deaths while evaluating it

    def add(self, program: Program) -> None:
        self._waiting.append(program)
        self._sources.add((program.task, program.source_hash))

    def under_way(self, task: str, source_hash: str) -> bool:
        """A program of this source is queued or being evaluated."""
        return (task, source_hash) in self._sources

    def start(self, submit: Submit) -> None:
        """Every idle slot takes the next waiting program."""
        while self._idle and self._waiting:
            slot, program = self._idle.popleft(), self._waiting.popleft()
            future = submit(slot, program)
            self._running[future] = (slot, program)
            self.pacing.started(future)

    def owns(self, future: Future) -> bool:
        return future in self._running

    def finished(self, future: Future) -> tuple[int, Program]:
        """The slot and program of a finished evaluation; the slot is idle again."""
        self.pacing.finished(future, "evaluation")
        slot, program = self._running.pop(future)
        self._idle.append(slot)
        return slot, program

    def lost(self, program: Program) -> int | None:
        """The program's evaluator died: the program goes first in line again and its count of
        losses is returned, or None once it was lost too often (then it is charged with a crash)."""
        count = self._lost.get(program.id, 0) + 1
        self._lost[program.id] = count
        if count > MAX_LOST_EVALUATIONS:
            return None
        self._waiting.appendleft(program)
        return count

    def recorded(self, program: Program) -> None:
        """The program's result is in the archive: its source is no longer under way."""
        self._sources.discard((program.task, program.source_hash))

    def futures(self) -> list[Future]:
        return list(self._running)

    def programs(self) -> list[Program]:
        """Programs waiting for their evaluation or being evaluated."""
        return [*self._waiting, *(program for _, program in self._running.values())]

    @property
    def queued(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    def __bool__(self) -> bool:
        return bool(self._waiting or self._running)

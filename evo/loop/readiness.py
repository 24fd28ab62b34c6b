"""Which tasks have a correct program (and so may be searched), which still wait for their first one
(seed proposals, repairs of their failed attempts), and when one of those is set aside.

The run loop owns one; it tells it what is under way (proposals out, evaluations queued or running),
since only the loop knows its futures.
"""
from __future__ import annotations

from collections import Counter, deque
from typing import Callable, Iterable

from evo.core.program import SEED, Program
from evo.loop.seeding import Seeding

Events = Callable[..., None]


class Readiness:
    def __init__(self, archive, task_names: Callable[[], list[str]], seeding: Seeding | None, events: Events):
        """``task_names``: the run's tasks now (tasks may join while the search runs);
        ``seeding``: None where no seed proposal can come (no LLM)."""
        self.archive = archive
        self.task_names = task_names
        self.seeding = seeding
        self.events = events
        self.ready: set[str] = set()  # tasks with at least one elite

    def load(self, names: Iterable[str]) -> None:
        """Tasks already holding an elite (a resumed run, a task that joins) are ready."""
        self.ready.update(name for name in names if self.archive.has_elites(name))

    def became_ready(self, task: str) -> None:
        self.ready.add(task)

    def attempts_out(self, tasks_out: Iterable[str]) -> Counter:
        """Proposals under way for each task without a correct program (attempts not yet counted);
        ``tasks_out``: the task of each proposal under way."""
        return Counter(task for task in tasks_out if task not in self.ready)

    def seed_task(self, waiting: list[Program], tasks_out: Iterable[str]) -> str | None:
        """The task the next seed proposal is for (evo.loop.seeding), if any: not one whose seed kernels
        are still to be evaluated (``waiting``: the programs queued or under evaluation)."""
        names = self.task_names()
        if self.seeding is None or len(self.ready) == len(names):
            return None
        shipped = {p.task for p in waiting if p.operator == SEED}
        unready = [name for name in names if name not in self.ready and name not in shipped]
        return self.seeding.next_task(unready, self.attempts_out(tasks_out), Counter(p.task for p in waiting))

    def next_repair(self, repairs: deque, room: list[int], left: int, tasks_out: Iterable[str]) -> Program | None:
        """The failed child to repair now, if its island has room; repairing a child of a task without a
        correct program is an attempt at its first kernel, dropped once the task may make no more."""
        out = list(tasks_out)
        while repairs and left > 0 and repairs[0].island in room:
            program = repairs.popleft()
            if (program.task in self.ready or self.seeding is None
                    or self.seeding.may_attempt(program.task, self.attempts_out(out)[program.task])):
                return program
        return None

    def check(self, task: str, last: str, under_way: bool, files_hash: str) -> None:
        """A task without a correct program, with nothing of it ``under_way``, is set aside when no seed
        can come any more (``last``: what the last attempt came to)."""
        if task in self.ready or under_way:
            return
        if self.seeding is None:
            self.set_aside(task, "seed_evaluation", f"its seed kernels all failed ({last})", files_hash)
        elif self.seeding.exhausted(task):
            self.set_aside(task, "seed_evaluation", self.seeding.reason(task, last), files_hash)

    def set_aside(self, task: str, stage: str, reason: str, files_hash: str) -> None:
        """The task is not searched further: recorded with why, and shown by status and report."""
        self.archive.set_aside(task, stage, reason[:2000], files_hash)
        self.events("task_set_aside", task=task, stage=stage, reason=reason)

"""``run.budget.per_task``: at most so many child evaluations per task.

``run.budget.evaluations`` caps children over the whole run; sweeps and repairs give some tasks far
more of them than others.  This cap counts children per task the same way the global budget does:
evaluations of programs an operator made (seeds are outside both), plus the children under way
(queued, under evaluation, or proposed from a parent), so that no task is given more than its cap.
A task at its cap is given no proposal of any kind; the run loop ends when every task is at its cap
or the global budget is spent.  A resumed run starts from the archive's counts.
"""
from __future__ import annotations

from collections import Counter, deque
from typing import Callable, Iterable

from evo.loop.feedback import Feedback


class TaskBudget:
    def __init__(self, cap: int | None):
        self.cap = cap  # None: no cap per task
        self.evaluated: Counter = Counter()  # task -> child evaluations recorded, resumes included

    def load(self, archive) -> None:
        """The counts of the evaluations the archive holds (a resumed run's)."""
        if self.cap is not None:  # a grouped join over every evaluation: only where a cap reads it
            self.evaluated = Counter(archive.child_evaluation_counts())

    def recorded(self, task: str) -> bool:
        """A child of ``task`` was evaluated; True when that brings the task to its cap."""
        self.evaluated[task] += 1
        return self.evaluated[task] == self.cap

    def capped(self, under_way: Iterable[str]) -> set[str]:
        """The tasks at their cap, counting ``under_way``: the task of each child under way."""
        if self.cap is None:
            return set()
        committed = self.evaluated + Counter(under_way)
        return {task for task, n in committed.items() if n >= self.cap}

    def open(self, ready: set[str], under_way: Iterable[str], feedback: Feedback) -> set[str]:
        """The tasks of ``ready`` under their cap.  The repairs and sweeps ``feedback`` holds for the
        others are dropped, not kept: a task capped by children under way reopens only when one of its
        proposals comes back without a child, and the island cycle then gives it its last ones."""
        capped = self.capped(under_way)
        if capped:
            _drop(capped, feedback.repairs, lambda program: program.task)
            _drop(capped, feedback.sweeps, lambda sweep: sweep[0].task)
        return ready - capped


def _drop(capped: set[str], queue: deque, task_of: Callable[[object], str]) -> None:
    """Take the entries of ``capped`` tasks out of ``queue``: left in, one at its head would hold back
    the others' (the loop takes from the head)."""
    if any(task_of(entry) in capped for entry in queue):
        kept = [entry for entry in queue if task_of(entry) not in capped]
        queue.clear()
        queue.extend(kept)

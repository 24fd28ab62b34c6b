"""Checking references and deriving seeds for many tasks at once, on one device.

A run's start-up runs every task's reference once (``check_task``) and, for a
task that ships no seed, compiles it with ``torch.compile`` (``compile_seed``,
tens of seconds of CPU each).  One sandbox worker per task at a time, up to
``parallel`` of them, does this concurrently; a task that ran out of GPU
memory beside the others is tried again alone, so a problem that fits the GPU
by itself is not lost to the crowd.
"""
from __future__ import annotations

import contextlib
import queue
import threading
from dataclasses import dataclass

from evaluator.replies import DerivedSeed, TaskCheck
from evaluator.sandbox import SandboxWorker


@dataclass(frozen=True)
class Preparation:
    """One task to prepare: its reference checked, and a seed derived if ``seed`` is set."""

    name: str
    source: str
    seed: bool


@dataclass(frozen=True)
class PreparedTask:
    """A task's preparation: its reference's check, and its derived seed where one was asked
    (None: not asked, or the check failed)."""

    check: TaskCheck
    seed: DerivedSeed | None = None

    @property
    def out_of_memory(self) -> bool:
        """The check or the derivation ran out of the GPU's memory (the sandbox's verdict)."""
        return self.check.out_of_memory or bool(self.seed and self.seed.out_of_memory)


def prepare_tasks(request, tasks: list[Preparation], parallel: int, make_worker,
                  on_outcome=None, alone=None) -> dict[str, PreparedTask]:
    """Each of ``tasks`` prepared, by name.

    ``request(worker, kind, name, source)`` sends one request to a :class:`SandboxWorker`;
    ``make_worker()`` starts one.  Workers beyond the first are closed at the end.
    ``on_outcome(name, outcome)`` is told each task's final outcome as soon as it is known.
    ``alone()``: a context manager under which nothing else runs on the device (the evaluator's
    pipeline drained: tasks prepared while a search goes on); a task that ran out of GPU memory is
    prepared again under it, as it is, without it, when it ran beside other preparations.
    """
    tell = on_outcome or (lambda name, outcome: None)
    results: dict[str, PreparedTask] = {}
    todo: queue.Queue[Preparation] = queue.Queue()
    for task in tasks:
        todo.put(task)
    lock = threading.Lock()

    def prepare(worker: SandboxWorker, task: Preparation) -> PreparedTask:
        check = request(worker, "check_task", task.name, task.source)
        seed = request(worker, "compile_seed", task.name, task.source) if check.ok and task.seed else None
        return PreparedTask(check, seed)

    def drain(worker: SandboxWorker) -> None:
        while True:
            try:
                task = todo.get_nowait()
            except queue.Empty:
                return
            outcome = prepare(worker, task)
            with lock:
                results[task.name] = outcome
            if not (again and outcome.out_of_memory):  # else: again, alone
                tell(task.name, outcome)

    count = max(1, min(parallel, len(tasks)))
    again = count > 1 or alone is not None  # a task out of memory in company is prepared again
    workers = [make_worker() for _ in range(count)]
    try:
        threads = [threading.Thread(target=drain, args=(w,), daemon=True) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if again:  # what failed for memory in company is tried again alone
            for task in tasks:
                if results[task.name].out_of_memory:
                    for extra in workers[1:]:
                        extra.close()
                    del workers[1:]
                    with alone() if alone is not None else contextlib.nullcontext():
                        results[task.name] = prepare(workers[0], task)
                    tell(task.name, results[task.name])
    finally:
        for worker in workers[1:]:
            worker.close()
    return results


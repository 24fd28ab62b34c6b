"""A run's tasks at start-up: references checked and missing seeds derived, many at once.

A task that cannot be searched (its reference raises, hangs or does not fit
the GPU; it has no seed kernel and none can be made) is set aside with one
line saying why, and every other task goes on.  A task set aside by an earlier
start of the same run stays aside while its problem file and seed files are
unchanged (its reference is not run, its seed not derived again); once one
changes it is tried again.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from rich.console import Console

from evaluator import DerivedSeed, Preparation, PreparedTask, TaskCheck
from evo.core.dot_precision import seed_kernels
from evo.core.task import Task
from evo.loop.seed_store import StoredSeed
from operators.split_k import split_seed

if TYPE_CHECKING:
    from islands.backend import Backend

# Why a task is not searched: its reference failed (``reference``), ran out of GPU memory
# (``memory``) or did not finish (``timeout``); it has no seed (``seed``); its seeds all failed
# their evaluation (``seed_evaluation``, decided by the run loop).
STAGES = ("reference", "memory", "timeout", "seed", "seed_evaluation")


@dataclass(frozen=True)
class SetAside:
    task: str
    stage: str
    reason: str
    source_hash: str

    def line(self) -> str:
        return f"task {self.task} set aside ({self.stage}): {self.reason}"


@dataclass
class Prepared:
    tasks: list[Task]  # to search; empty ``seeds`` on a task without programs: the LLM writes them
    set_aside: list[SetAside]  # decided by this start
    kept_aside: list[SetAside]  # by an earlier start, the problem file unchanged
    derived: dict[str, StoredSeed] = field(default_factory=dict)  # seeds derived now (or why not), to store
    checked: dict[str, TaskCheck] = field(default_factory=dict)  # references that passed a check run now, to store

    def add(self, other: "Prepared") -> None:
        self.tasks += other.tasks
        self.set_aside += other.set_aside
        self.kept_aside += other.kept_aside
        self.derived.update(other.derived)
        self.checked.update(other.checked)


def seedless(task: Task, tried: str) -> str:
    """The message of a task that has no seed, naming both ways out."""
    return (f"{task.path} has no seed kernel ({tried}): ship one as seeds/{Path(task.path).name} beside the "
            "problem file (or name it with SEED = 'path.py'), or set llm.model (with run.llm_seeds > 0) so that "
            "an LLM writes the first kernels")


def prepare_tasks(tasks: list[Task], backend: Backend, *, on_gpu: bool, compile_seeds: bool, llm: bool,
                  earlier: dict[str, dict], has_programs: set[str], console: Console,
                  stored: Callable[[Task], StoredSeed | None] | None = None, tolerance: str = "strict") -> Prepared:
    """Check every task's reference and derive the seeds that are missing, many at once (the
    backend's ``prepare``); ``earlier``: the run's set-aside records by task, ``has_programs``:
    the tasks the run's archive already holds programs of (their seeds are in it); ``stored``: what
    an earlier start of the run derived for a task's current source (evo/loop/seed_store.py), taken
    instead of deriving again; ``tolerance``: the evaluator's, which sets the precision of a
    derived GEMM seed's first kernels (``evo.core.dot_precision.seed_kernels``)."""
    prepared = Prepared(tasks=[], set_aside=[], kept_aside=[])
    for piece in prepare_stream(tasks, backend, on_gpu=on_gpu, compile_seeds=compile_seeds, llm=llm,
                                earlier=earlier, has_programs=has_programs, console=console, stored=stored,
                                tolerance=tolerance):
        prepared.add(piece)
    order = {t.name: i for i, t in enumerate(tasks)}  # the tasks' own order, not the order they came in
    prepared.tasks.sort(key=lambda t: order[t.name])
    prepared.set_aside.sort(key=lambda a: order[a.task])
    return prepared


def prepare_stream(tasks: list[Task], backend: Backend, *, on_gpu: bool, compile_seeds: bool, llm: bool,
                   earlier: dict[str, dict], has_programs: set[str], console: Console,
                   stored: Callable[[Task], StoredSeed | None] | None = None,
                   checked: Callable[[Task], TaskCheck | None] | None = None,
                   tolerance: str = "strict") -> Iterator[Prepared]:
    """:func:`prepare_tasks` as it goes: first the tasks kept aside, then, at once, those whose
    reference passed its check on an earlier start (``checked``, evo.loop.check_store) and need no
    seed derived, then each other task as its preparation ends (the backend's ``prepare_stream``),
    so that a run may search the first tasks while the others are still being prepared."""
    kept, todo = [], []
    for task in tasks:
        record = earlier.get(task.name)
        if record is not None and record["source_hash"] == task.files_hash:
            kept.append(SetAside(task.name, record["stage"], record["reason"], task.files_hash))
            console.print(f"[yellow]task {task.name} stays set aside (its files unchanged): "
                          f"{record['reason']}", soft_wrap=True)
        else:
            todo.append(task)
    yield Prepared(tasks=[], set_aside=[], kept_aside=kept)
    derive = {t.name for t in todo if not t.seeds and t.name not in has_programs and compile_seeds and on_gpu}
    known = {name: outcome for name in derive if stored and (outcome := stored(_named(todo, name))) is not None}
    derive -= set(known)
    if derive:
        console.print(f"deriving seeds from torch.compile for {len(derive)} tasks ...")
    earlier_checks = {t.name: check for t in todo
                      if t.name not in derive and checked and (check := checked(t)) is not None}
    if earlier_checks:
        ready = Prepared(tasks=[], set_aside=[], kept_aside=[])
        for name, check in earlier_checks.items():
            ready.add(_prepared(_named(todo, name), PreparedTask(check), known.get(name),
                                has_programs=name in has_programs, llm=llm, tried=_tried(compile_seeds, on_gpu),
                                console=console, tolerance=tolerance, fresh=False))
        yield ready
        todo = [t for t in todo if t.name not in earlier_checks]
    if not todo:
        return
    wanted = [Preparation(t.name, t.source, t.name in derive) for t in todo]
    outcomes = backend.prepare_stream(wanted)
    by_name = {t.name: t for t in todo}
    for name, outcome in outcomes:
        yield _prepared(by_name[name], outcome, known.get(name), has_programs=name in has_programs, llm=llm,
                        tried=_tried(compile_seeds, on_gpu), console=console, tolerance=tolerance)


def _prepared(task: Task, outcome: PreparedTask, known: StoredSeed | None, *, has_programs: bool, llm: bool, tried: str,
              console: Console, tolerance: str = "strict", fresh: bool = True) -> Prepared:
    """One task's preparation decided: searched (with its seed, if derived), or set aside.  ``fresh``:
    its check ran now (a passed one is stored), not taken from an earlier start."""
    check, seed = outcome.check, outcome.seed
    derived = {}
    if seed is not None:
        derived[task.name] = StoredSeed(source=seed.source if seed.ok else None,
                                        error=None if seed.ok else seed.error, stored_at=time.time())
    elif known is not None:
        seed = DerivedSeed(ok=known.ok, source=known.source, error=known.message(task) or "")
    for warning in check.warnings:
        console.print(f"[yellow]task {task.name}: {warning}", soft_wrap=True)
    decided = _decide(task, check, seed, has_programs=has_programs, llm=llm, tried=tried, tolerance=tolerance)
    if isinstance(decided, SetAside):
        console.print(f"[red]{decided.line()}", soft_wrap=True)
        return Prepared(tasks=[], set_aside=[decided], kept_aside=[], derived=derived)
    if decided is not task and decided.seeds:
        console.print(f"task {task.name}: seed kernel derived from torch.compile's Triton kernels"
                      + (f" by {known.origin or 'an earlier start of this run'}" if known is not None else ""))
    elif not decided.seeds and not has_programs:
        console.print(f"task {task.name}: no seed kernel; the LLM writes the first kernels")
    return Prepared(tasks=[decided], set_aside=[], kept_aside=[], derived=derived,
                    checked={task.name: check} if fresh and check.ok else {})


def _named(tasks: list[Task], name: str) -> Task:
    return next(t for t in tasks if t.name == name)


def _tried(compile_seeds: bool, on_gpu: bool) -> str:
    if not on_gpu:
        return "on a GPU, torch.compile derives one"
    return "torch.compile was not asked: run.compile_seeds=false" if not compile_seeds else ""


def starting_kernels(seed: str, tolerance: str) -> tuple[str, ...]:
    """The kernels a run starts a task from, given the seed derived from torch.compile: its twin
    on tensor cores first where it has one (``seed_kernels``), and before those, where their GEMM
    templates have few tiles and a long K, each split along K (``split_seed``: inductor's template
    walks all of K in one program per tile, cuBLAS splits it).  Both are split: on level1/6 the
    exact split ran 1.45x cuBLAS's time on an H200, the twin's 1.9x."""
    kernels = seed_kernels(seed, tolerance)
    try:
        splits = tuple(s for k in kernels if (s := split_seed(k)) is not None)
    except Exception:  # a bug of the rewrite must not stop the start: the seeds without it
        return kernels
    return (*splits, *kernels)


def _decide(task: Task, check: TaskCheck, seed: DerivedSeed | None, *, has_programs: bool, llm: bool,
            tried: str, tolerance: str = "strict") -> Task | SetAside:
    if not check.ok:
        if check.stage in ("memory", "host_memory", "timeout"):  # the error says what the reference did
            return SetAside(task.name, check.stage, check.error, task.files_hash)
        return SetAside(task.name, "reference", f"the reference failed: {check.error}", task.files_hash)
    if task.seeds or has_programs:
        return task
    if seed and seed.ok:
        return dataclasses.replace(task, seeds=starting_kernels(seed.source, tolerance))
    if llm:
        return task
    why = f"torch.compile gave none: {seed.error}" if seed else tried
    return SetAside(task.name, "seed", seedless(task, why), task.files_hash)


def nothing_to_search(aside: list[SetAside]) -> str:
    return "nothing to search: every task was set aside\n" + "\n".join(a.line() for a in aside)

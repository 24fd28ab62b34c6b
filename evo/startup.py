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
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from evaluator import Preparation
from evo.task import Task

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


def seedless(task: Task, tried: str) -> str:
    """The message of a task that has no seed, naming both ways out."""
    return (f"{task.path} has no seed kernel ({tried}): ship one as seeds/{Path(task.path).name} beside the "
            "problem file (or name it with SEED = 'path.py'), or set llm.model so that an LLM writes the first "
            "kernels")


def prepare_tasks(tasks: list[Task], backend, *, on_gpu: bool, compile_seeds: bool, llm: bool,
                  earlier: dict[str, dict], has_programs: set[str], console: Console) -> Prepared:
    """Check every task's reference and derive the seeds that are missing, many at once (the
    backend's ``prepare``); ``earlier``: the run's set-aside records by task, ``has_programs``:
    the tasks the run's archive already holds programs of (their seeds are in it)."""
    kept, todo = [], []
    for task in tasks:
        record = earlier.get(task.name)
        if record is not None and record["source_hash"] == task.files_hash:
            kept.append(SetAside(task.name, record["stage"], record["reason"], task.files_hash))
            console.print(f"[yellow]task {task.name} stays set aside (its files unchanged): "
                          f"{record['reason']}", soft_wrap=True)
        else:
            todo.append(task)
    derive = {t.name for t in todo if not t.seeds and t.name not in has_programs and compile_seeds and on_gpu}
    if derive:
        console.print(f"deriving seeds from torch.compile for {len(derive)} tasks ...")
    outcomes = backend.prepare([Preparation(t.name, t.source, t.name in derive) for t in todo]) if todo else {}
    ready, aside = [], []
    for task in todo:
        outcome = outcomes[task.name]
        check, seed = outcome["check"], outcome.get("seed")
        for warning in check.get("warnings", []):
            console.print(f"[yellow]task {task.name}: {warning}", soft_wrap=True)
        decided = _decide(task, check, seed, has_programs=task.name in has_programs, llm=llm,
                          tried=_tried(compile_seeds, on_gpu))
        if isinstance(decided, SetAside):
            aside.append(decided)
            console.print(f"[red]{decided.line()}", soft_wrap=True)
            continue
        if decided is not task and decided.seeds:
            console.print(f"task {task.name}: seed kernel derived from torch.compile's Triton kernels")
        elif not decided.seeds and task.name not in has_programs:
            console.print(f"task {task.name}: no seed kernel; the LLM writes the first kernels")
        ready.append(decided)
    return Prepared(tasks=ready, set_aside=aside, kept_aside=kept)


def _tried(compile_seeds: bool, on_gpu: bool) -> str:
    if not on_gpu:
        return "on a GPU, torch.compile derives one"
    return "torch.compile was not asked: run.compile_seeds=false" if not compile_seeds else ""


def _decide(task: Task, check: dict, seed: dict | None, *, has_programs: bool, llm: bool,
            tried: str) -> Task | SetAside:
    if not check.get("ok"):
        if check.get("stage") in ("memory", "timeout"):  # the error says what the reference did
            return SetAside(task.name, check["stage"], str(check.get("error")), task.files_hash)
        return SetAside(task.name, "reference", f"the reference failed: {check.get('error')}", task.files_hash)
    if task.seeds or has_programs:
        return task
    if seed and seed.get("ok"):
        return dataclasses.replace(task, seeds=(seed["source"],))
    if llm:
        return task
    why = f"torch.compile gave none: {seed.get('error')}" if seed else tried
    return SetAside(task.name, "seed", seedless(task, why), task.files_hash)


def nothing_to_search(aside: list[SetAside]) -> str:
    return "nothing to search: every task was set aside\n" + "\n".join(a.line() for a in aside)

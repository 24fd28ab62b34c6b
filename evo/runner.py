"""`evo run`: validate everything, then start or resume a run in ``run.dir``.

Order matters for bad input: tasks, run dir, LLM endpoint and references are
checked before anything is written, so a failed start leaves no run state.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

from rich.console import Console

from archive import Archive, ArchiveError
from evaluator import Evaluator, resolve_device
from evo.config import Components
from evo.controller import Controller
from evo.errors import RunDirError, TaskError
from evo.progress import RunEvents
from evo.task import Task
from evo.summary import summary_rows, summary_table
from islands import Island, LocalBackend

RUN_FILE = "run.json"
LOCK_FILE = ".lock"


def code_version() -> str:
    """The engine's version, and its git commit when it runs from a checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("evo-kernels")
    except PackageNotFoundError:
        text = "unknown"
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=Path(__file__).parent,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        if out.returncode == 0:
            text += f"+g{out.stdout.strip()}" + (".dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return text


def write_atomically(path: Path, text: str) -> None:
    """Write a whole file or nothing: a run killed mid-write must still resume."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _lock_run_dir(run_dir: Path):
    """An exclusive lock on the run dir: two engines must never drive one run."""
    handle = open(run_dir / LOCK_FILE, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise RunDirError(f"run.dir {run_dir} is in use by another evo run; wait for it to finish") from None
    return handle


def _check_run_dir(run_dir: Path, task_names: list[str]) -> bool:
    """True when ``run_dir`` holds a run to resume; raises if it cannot be used."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"run.dir {run_dir} exists and is not a directory")
    marker = run_dir / RUN_FILE
    if marker.exists():
        try:
            previous = json.loads(marker.read_text())
        except (OSError, ValueError) as exc:
            raise RunDirError(f"run.dir {run_dir} has an unreadable {RUN_FILE}: {exc}") from None
        if sorted(previous.get("tasks", [])) != sorted(task_names):
            raise RunDirError(
                f"run.dir {run_dir} holds a run of tasks {', '.join(previous.get('tasks', []))}, "
                f"not {', '.join(task_names)}: choose another run.dir or the same tasks"
            )
        if not os.access(run_dir, os.W_OK):
            raise RunDirError(f"run.dir {run_dir} is not writable")
        return True
    existing = run_dir
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise RunDirError(f"run.dir {run_dir} cannot be created: {existing} is not a writable directory")
    if run_dir.exists() and any(not p.name.endswith(".tmp") and p.name != LOCK_FILE for p in run_dir.iterdir()):
        raise RunDirError(f"run.dir {run_dir} is not empty and holds no evo run")
    return False


def make_backend(c: Components, device: str, gpus: int, resume_count: int):
    """The islands and evaluators of ``c`` on its backend (also what experiments/pipeline_bench.py drives)."""
    workers = c.evaluator.workers or (gpus if device == "cuda" else 1)
    islands = [Island(i, c.operators, c.weights, c.run.seed, resume_count, c.descriptors,
                      requests=c.run.proposals_per_island) for i in range(c.island_count)]
    held = c.run.proposals_held(c.llm is not None)  # each served at once: the prepared wait inside the island
    if c.backend == "local":
        return LocalBackend(islands, lambda i: Evaluator(c.evaluator, device, i if device == "cuda" else None),
                            workers, held)
    from islands.ray_backend import RayBackend

    return RayBackend(c.ray, islands, c.evaluator, device, workers, held)


def _with_seed(task: Task, backend, from_compile: bool, console: Console) -> Task:
    """The task, with a seed kernel derived from torch.compile's Triton if it ships none."""
    if task.seeds:
        return task
    missing = (f"task {task.name} ({task.path}) has no seed kernel: the search starts from one. Put a "
               f"candidate defining ModelNew in seeds/{Path(task.path).name} beside the problem file, "
               "or name it with SEED = 'path.py' in the problem file")
    if not from_compile:
        raise TaskError(missing + " (on a GPU, run.compile_seeds=true derives one from torch.compile)")
    reply = backend.compile_seed(task.name, task.source)
    if not reply.get("ok"):
        raise TaskError(f"{missing}; deriving one from torch.compile failed: {reply.get('error')}")
    console.print(f"task {task.name}: seed kernel derived from torch.compile's Triton kernels")
    return dataclasses.replace(task, seeds=(reply["source"],))


def run_search(c: Components, config_yaml: str, console: Console | None = None) -> list[dict]:
    console = console or Console()
    run_dir = Path(c.run.dir).expanduser().resolve()
    names = [t.name for t in c.tasks]
    resuming = _check_run_dir(run_dir, names)
    if not c.tasks:
        raise TaskError("no tasks to run")
    if c.llm is not None:
        console.print(f"checking LLM endpoint {c.llm.model} ...")
        c.llm.check()
    device, gpus = resolve_device(c.evaluator.device)
    if c.backend == "ray" and c.ray.address and c.evaluator.device != "cpu":
        from islands.ray_backend import cluster_gpus

        cluster = cluster_gpus(c.ray)  # evaluators go to every GPU of the cluster, not just this node's
        if cluster:
            device, gpus = "cuda", cluster
    previous = json.loads((run_dir / RUN_FILE).read_text()) if resuming else {}
    resume_count = int(previous.get("resumes", -1)) + 1
    console.print(f"{'resuming' if resuming else 'starting'} run in {run_dir}: {len(names)} tasks, "
                  f"{c.island_count} islands, device {device}" + (f" ({gpus} GPUs)" if gpus else ""),
                  soft_wrap=True)
    backend = make_backend(c, device, gpus, resume_count)
    try:
        for task in c.tasks:
            check = backend.check_task(task.name, task.source)
            if not check.get("ok"):
                raise TaskError(f"the reference of task {task.name} ({task.path}) failed: {check.get('error')}")
            for warning in check.get("warnings", []):
                console.print(f"[yellow]task {task.name}: {warning}")
        tasks = [_with_seed(task, backend, c.compile_seeds and device == "cuda", console) for task in c.tasks]
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = _lock_run_dir(run_dir)  # held until this process exits, however it exits
        # run.json first: from then on the directory is a run that a later start resumes.
        write_atomically(run_dir / RUN_FILE, json.dumps(
            {"tasks": names, "resumes": resume_count, "device": device, "started": time.time()}, indent=1))
        if not (run_dir / "config.yaml").exists():
            write_atomically(run_dir / "config.yaml", config_yaml)
        archive = Archive(c.archive_url, descriptors=c.descriptors, cvt_cells=c.cvt_cells, seed=c.run.seed)
        if archive.get_meta("config") is None:
            archive.set_meta("config", config_yaml)
        archive.set_meta(f"code_version.{resume_count}", code_version())
        events = RunEvents(run_dir, c.run.budget_evaluations, show=c.progress)
        if hasattr(backend, "placement"):
            placement = backend.placement()
            events("placement", **placement)
            console.print(f"Ray: {placement['nodes']} nodes; islands on {len(set(placement['islands']))}, "
                          f"evaluators on {len(set(placement['evaluators']))}")
        if c.steering is not None:
            c.steering.budget.resume(archive.llm_spend())  # budgets span the whole run, resumes included
        try:
            Controller(settings=c.run, tasks=tasks, archive=archive, backend=backend, migration=c.migration,
                       events=events, resume_count=resume_count, selection=c.selection,
                       inspiration=c.inspiration, steering=c.steering).run()
        except ArchiveError as exc:
            raise ArchiveError(f"{exc}; every committed change is kept: run `evo run run.dir={run_dir}` "
                               "again to continue") from None
        finally:
            events.close()
        rows = summary_rows(archive, names)
        console.print(summary_table(rows, title=f"evo run {run_dir} ({device})"))
        spend = archive.llm_spend()
        if spend["calls"]:
            console.print(f"LLM: {spend['calls']} calls, {spend['errors']} failed, ${spend['cost_usd']:.4f}")
        archive.close()
        lock.close()
        return rows
    finally:
        backend.close()

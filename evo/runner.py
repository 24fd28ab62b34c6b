"""`evo run`: validate everything, then start or resume a run in ``run.dir``.

Order matters for bad input: tasks, run dir, LLM endpoint and references are
checked before anything is written, so a failed start leaves no run state.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path

from rich.console import Console

from archive import Archive, ArchiveError
from archive.queries import open_reader
from evaluator import Evaluator, resolve_device
from evaluator.device import gpu_environment
from evaluator.containment import describe, probe
from evo.config import Components
from evo.core.errors import RunError, TaskError
from evo.core.run_dir import RUN_FILE, check_run_dir, lock_run_dir, write_atomically
from evo.interrupts import interrupted
from evo.loop.arrivals import TaskArrivals
from evo.loop.borrow import Borrowed, first_found
from evo.loop.check_store import store_check, stored_check
from evo.loop.controller import Controller
from evo.loop.novelty import NoveltyFilter
from evo.loop.seed_store import store_seed, stored_seed
from evo.loop.seeding import llm_seeding
from evo.loop.startup import Prepared, nothing_to_search, prepare_stream
from evo.resume import (
    Override,
    held_by_run,
    store_sources,
    tasks_to_resume,
)
from evo.views.progress import RunEvents
from evo.views.summary import summary_rows, summary_table
from islands import Island, LocalBackend


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


def _earlier_state(reader) -> tuple[dict[str, dict], set[str]]:
    """(set-aside records by task, tasks with programs) of the run being resumed."""
    if reader is None:
        return {}, set()
    try:
        return reader.set_aside(), {t for t, row in reader.task_counts().items() if row["programs"]}
    except Exception:  # noqa: BLE001 (an archive the Archive itself will refuse with its reason)
        return {}, set()


def run_search(c: Components, config_yaml: str, console: Console | None = None,
               overrides: list[Override] = ()) -> list[dict]:
    """``overrides``: the keys this start changes in a resumed run's config (evo/resume.py)."""
    console = console or Console()
    run_dir = Path(c.run.dir).expanduser().resolve()
    names = [t.name for t in c.tasks]
    resuming = check_run_dir(run_dir, names)
    if not c.tasks:
        raise TaskError("no tasks to run")
    notes = []
    if resuming:  # problem files edited since the run stored them stop it here, before any work
        tasks, notes = tasks_to_resume(c.tasks, held_by_run(c.archive_url, names),
                                       keep_stored=c.keep_stored_sources)
        c = dataclasses.replace(c, tasks=tasks)
    if c.llm is not None:
        console.print(f"checking LLM endpoint {c.llm.model} ...")
        c.llm.check()
    device, gpus = resolve_device(c.evaluator.device)
    if c.backend == "ray" and c.ray.address and c.evaluator.device != "cpu":
        from islands.ray_backend import cluster_gpus

        cluster = cluster_gpus(c.ray)  # evaluators go to every GPU of the cluster, not just this node's
        if cluster:
            device, gpus = "cuda", cluster
    # Where references are checked, for a check stored by an earlier start to stand: this host's GPUs
    # (a cluster's nodes may hold others: there every start checks again).
    environment = gpu_environment() if device == "cuda" and not (c.backend == "ray" and c.ray.address) else ""
    borrowed = Borrowed.open(c.seeds_from, environment) if c.seeds_from else None  # run.seeds_from
    c = dataclasses.replace(c, evaluator=c.evaluator.on(device))  # what depends on the device, decided once
    previous = json.loads((run_dir / RUN_FILE).read_text()) if resuming else {}
    resume_count = int(previous.get("resumes", -1)) + 1
    console.print(f"{'resuming' if resuming else 'starting'} run in {run_dir}: {len(names)} tasks, "
                  f"{c.island_count} islands, device {device}" + (f" ({gpus} GPUs)" if gpus else ""),
                  soft_wrap=True)
    for line in [*(f"override {o.line()}" for o in overrides), *notes]:
        console.print(f"  {line}", soft_wrap=True, markup=False)
    contained = probe(network=c.evaluator.isolate_network, mode=c.evaluator.containment, cuda=device == "cuda")
    # This host's; each evaluation records its own (other Ray nodes may allow other things).
    console.print(describe(contained), soft_wrap=True, markup=False)
    backend = make_backend(c, device, gpus, resume_count)
    seeding = llm_seeding(c.run, c.operators, c.steering is not None)  # the LLM writes missing seeds
    earlier = open_reader(c.archive_url) if resuming else None
    try:
        aside_before, has_programs = _earlier_state(earlier)
        stream = prepare_stream(c.tasks, backend, on_gpu=device == "cuda", compile_seeds=c.compile_seeds,
                                llm=seeding is not None, earlier=aside_before, has_programs=has_programs,
                                console=console,
                                stored=first_found((lambda t: stored_seed(earlier, t)) if earlier else None,
                                                   borrowed.seed if borrowed else None),
                                checked=first_found((lambda t: stored_check(earlier, t, environment)) if earlier else None,
                                                    borrowed.check if borrowed else None),
                                tolerance=c.evaluator.tolerance)
        # With a pipeline on a GPU the search starts with the first task ready, the others joining as
        # their preparation ends (its workers are stopped while a candidate times: evaluator.gate);
        # otherwise every task is prepared first.
        early = device == "cuda" and c.search_while_preparing and c.evaluator.pipeline > 1
        prepared = Prepared(tasks=[], set_aside=[], kept_aside=[])
        for piece in stream:
            prepared.add(piece)
            if early and prepared.tasks:
                break
        to_come = len(c.tasks) - len(prepared.tasks) - len(prepared.set_aside) - len(prepared.kept_aside)
        arrivals = TaskArrivals(stream, expected=to_come) if early else None
        if not prepared.tasks and not resuming:  # a failed start leaves no run state
            raise TaskError(nothing_to_search(prepared.set_aside + prepared.kept_aside))
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = lock_run_dir(run_dir)  # held until this process exits, however it exits
        # run.json first: from then on the directory is a run that a later start resumes.
        write_atomically(run_dir / RUN_FILE, json.dumps(
            {"tasks": names, "resumes": resume_count, "device": device, "started": time.time(),
             "containment": contained}, indent=1))
        if overrides or not (run_dir / "config.yaml").exists():  # the config the run last ran with
            write_atomically(run_dir / "config.yaml", config_yaml)
        version = code_version()
        archive = Archive(c.archive_url, descriptors=c.descriptors, cvt_cells=c.cvt_cells, seed=c.run.seed,
                          engine_version=version)
        if archive.get_meta("config") is None:
            archive.set_meta("config", config_yaml)
        if overrides:
            archive.set_meta(f"config.{resume_count}", config_yaml)
        archive.set_meta(f"code_version.{resume_count}", version)
        store_sources(archive, c.tasks)
        children = c.run.budget_evaluations  # the progress bar's end: the budget, or every task's cap if less
        if c.run.budget_per_task is not None:
            children = min(children, c.run.budget_per_task * len(names))
        events = RunEvents(run_dir, children, show=c.progress)

        def admit(piece: Prepared) -> None:
            """A task's preparation, recorded: its seed (derived or why not), or why it is set aside."""
            for name, outcome in piece.derived.items():  # derived or failed: not derived again by a later start
                store_seed(archive, next(t for t in c.tasks if t.name == name), source=outcome.source,
                           error=outcome.error, environment=environment)
            for name, check in piece.checked.items():  # passed: not run again by a start in this environment
                store_check(archive, next(t for t in c.tasks if t.name == name), check, environment)
            # Taken from run.seeds_from (asked only where this run held none): kept as this run's own.
            for searched in piece.tasks if borrowed else []:
                task = next(t for t in c.tasks if t.name == searched.name)  # as given: the keys hash its files
                if task.name in borrowed.seeds:
                    taken = borrowed.seeds[task.name]
                    store_seed(archive, task, source=taken.source, environment=taken.environment)
                if task.name in borrowed.checks:
                    store_check(archive, task, borrowed.checks[task.name], environment)
            for aside in piece.set_aside:
                archive.set_aside(aside.task, aside.stage, aside.reason, aside.source_hash)
                events("task_set_aside", task=aside.task, stage=aside.stage, reason=aside.reason)
            for task in piece.tasks:
                if task.name in aside_before:
                    archive.readmit(task.name)

        if overrides or notes:
            events("resumed", overrides=[o.to_dict() for o in overrides], notes=notes)
        admit(prepared)
        if not prepared.tasks:
            events.close()
            raise TaskError(nothing_to_search(prepared.set_aside + prepared.kept_aside))
        tasks = prepared.tasks
        if arrivals is not None and arrivals.open:
            console.print(f"searching {len(tasks)} tasks while the others are prepared")
        placement = backend.placement()
        if placement is not None:
            events("placement", **placement)
            console.print(f"Ray: {placement['nodes']} nodes; islands on {len(set(placement['islands']))}, "
                          f"evaluators on {len(set(placement['evaluators']))}")
        if c.steering is not None:
            c.steering.budget.resume(archive.llm_spend())  # budgets span the whole run, resumes included
        try:
            controller = Controller(
                settings=c.run, tasks=tasks, archive=archive, backend=backend, migration=c.migration,
                events=events, resume_count=resume_count, selection=c.selection, inspiration=c.inspiration,
                steering=c.steering, seeding=seeding, arrivals=arrivals, on_arrival=admit,
                novelty=NoveltyFilter(c.novelty, archive, embed=c.embeddings, events=events)
                if c.novelty.enabled and c.llm is not None else None)
            controller.run()
        except ArchiveError as exc:
            raise ArchiveError(f"{exc}; every committed change is kept: run `evo run run.dir={run_dir}` "
                               "again to continue") from None
        except (Exception, KeyboardInterrupt) as exc:
            # The evaluations under way are stopped with their workers (the backend's close, below),
            # not awaited: a resume evaluates them again.  The CLI says how to go on.
            if interrupted(exc):
                events("interrupted")
            raise
        finally:
            events.close()
        rows = summary_rows(archive, names)
        console.print(summary_table(rows, title=f"evo run {run_dir} ({device})"))
        aside = archive.set_aside_tasks()
        for name in names:
            if name in aside:
                console.print(f"[red]task {name} set aside ({aside[name]['stage']}): {aside[name]['reason']}",
                              soft_wrap=True)
        spend = archive.llm_spend()
        if spend["calls"]:
            console.print(f"LLM: {spend['calls']} calls, {spend['errors']} failed, ${spend['cost_usd']:.4f}")
        searched = [name for name in names if name not in aside]
        evaluated = archive.child_evaluation_count()
        archive.close()
        lock.close()
        if not searched:
            raise RunError(f"nothing was searched: every task was set aside (run.dir {run_dir} records why)")
        if evaluated == 0 and c.run.budget_evaluations > 0:
            raise RunError(f"no child kernel was evaluated (tasks {', '.join(searched)}): see "
                           f"{run_dir / 'events.jsonl'} for what failed")
        return rows
    finally:
        if earlier is not None:
            earlier.close()
        if borrowed is not None:
            borrowed.close()
        backend.close()

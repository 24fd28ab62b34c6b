"""The ``evo`` command: ``run`` (Hydra), ``eval``, ``status``, ``report`` and ``export``.

    evo run [key=value ...]            start or resume a search (Hydra overrides; -m for sweeps)
    evo eval task=PATH candidate=PATH  evaluate one candidate; the last line printed is JSON
    evo status run.dir=DIR             the tables of a running or finished run (reads it read-only)
    evo report run.dir=DIR [out=DIR]   plots and one self-contained HTML page (default out: DIR/report)
    evo export run.dir=DIR out=PATH [tasks=a,b] [min_speedup=X] [top_k=N]
                                       the best kernels as a Python package (merged into an existing one)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from evo.core.errors import EvoError

USAGE = __doc__


def _fail(message: str, code: int = 2) -> int:
    print(f"error: {message}", file=sys.stderr)  # unwrapped: messages hold paths
    return code


def _key_values(args: list[str], allowed: set[str]) -> tuple[dict[str, str], list[str]]:
    """Split ``key=value`` arguments into the ones in ``allowed`` and the rest."""
    picked, rest = {}, []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and key in allowed:
            picked[key] = value
        else:
            rest.append(arg)
    return picked, rest


def _run_main() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    @hydra.main(config_path="pkg://conf", config_name="config", version_base="1.3")
    def run(cfg) -> list[dict]:
        from evo.config import build, to_yaml
        from evo.interrupts import interrupted, one_interrupt
        from evo.runner import run_search

        hydra_cfg = HydraConfig.get()
        sweeping = hydra_cfg.mode == RunMode.MULTIRUN
        if sweeping:  # every sweep job gets its own run dir under hydra.sweep.dir
            cfg.run.dir = hydra_cfg.runtime.output_dir
        try:
            with one_interrupt():  # SIGINTs that come together (timeout's to the group, Ray's) count once
                cfg, overrides = _resumed(cfg, list(hydra_cfg.overrides.task))
                # per-task rows, for the sweep's summary
                return run_search(build(cfg), to_yaml(cfg), overrides=overrides)
        except EvoError as exc:
            if sweeping:
                raise  # the job fails; the sweep summary records why
            sys.exit(_fail(str(exc)))
        except (Exception, KeyboardInterrupt) as exc:  # Ctrl-C, at start-up or mid-search: every commit is kept
            if sweeping or not interrupted(exc):  # (a lock an interrupt broke on its way out counts as one)
                raise
            sys.exit(_fail(f"interrupted; every committed change is kept: run `evo run run.dir={cfg.run.dir}` "
                           "again to continue", 130))

    run()


def _resumed(cfg, overrides: list[str]):
    """For a run dir that holds a run: its saved config with the keys this command line gives
    (evo/resume.py), and the overrides that change it.  Otherwise ``cfg`` as composed."""
    from hydra import compose

    from evo.resume import resumed_config, saved_config

    saved = saved_config(Path(str(cfg.run.dir)).expanduser().resolve())
    if saved is None:
        return cfg, []
    return resumed_config(cfg, saved, overrides, compose(config_name="config"))


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException

    try:
        with initialize_config_module(config_module="conf", version_base="1.3"):
            return compose(config_name="config", overrides=overrides)
    except HydraException as exc:
        raise EvoError(str(exc)) from None


def eval_command(args: list[str]) -> int:
    from evaluator import Evaluator, resolve_device
    from evo.core.hydra_nodes import instantiate_node
    from evo.core.task import load_task

    picked, overrides = _key_values(args, {"task", "candidate"})
    if set(picked) != {"task", "candidate"}:
        return _fail("usage: evo eval task=PROBLEM_FILE candidate=CANDIDATE_FILE [evaluator.key=value ...]")
    try:
        cfg = _compose(overrides)
        settings = instantiate_node(cfg.evaluator, "evaluator")
        task = load_task(picked["task"])
        candidate_path = Path(picked["candidate"]).expanduser()
        if not candidate_path.is_file():
            raise EvoError(f"candidate file not found: {candidate_path.resolve()}")
        source = candidate_path.read_text(encoding="utf-8", errors="replace")
        device, _ = resolve_device(settings.device)
        settings = settings.on(device)
    except (EvoError, RuntimeError) as exc:
        return _fail(str(exc))
    from evaluator.containment import describe, probe

    # One plain line on stderr (stdout's last line stays the result's JSON): what is contained, what not.
    print(describe(probe(network=settings.isolate_network, mode=settings.containment, cuda=device == "cuda")),
          file=sys.stderr)
    evaluator = Evaluator(settings, device, 0 if device == "cuda" else None)
    try:
        check = evaluator.check_task(task.name, task.source)
        if not check.ok:
            return _fail(f"the reference of task {task.name} ({task.path}) failed: {check.error}")
        result = evaluator.evaluate(task.name, task.source, source)
    finally:
        evaluator.close()
    if result.error:
        print(result.error, file=sys.stderr)
    out = result.to_dict()
    out.pop("error")
    out.update(task=task.name, candidate=str(candidate_path.resolve()))
    print(json.dumps(out))
    return 0


def _run_args(args: list[str], usage: str, optional: set[str] = frozenset(),
              required: set[str] = frozenset()) -> dict[str, str]:
    """``run.dir=DIR`` and the command's other ``key=value`` arguments; EvoError on anything else."""
    picked, rest = _key_values(args, {"run.dir", *required, *optional})
    if rest or not {"run.dir", *required} <= set(picked):
        raise EvoError(f"usage: {usage}")
    return picked


def status_command(args: list[str]) -> int:
    from evaluator.containment import describe
    from evo.views.fast_p import fast_p_rows, task_bests, tolerance_of
    from evo.views.run_view import open_run
    from evo.views.summary import (
        fast_p_table,
        fragment_table,
        model_table,
        novelty_line,
        operator_table,
        phase_line,
        racing_line,
        status_table,
        timed_checks_line,
    )
    from operators.meta_prompt import STATE_KEY, table

    try:
        picked = _run_args(args, "evo status run.dir=DIR")
        with open_run(picked["run.dir"]) as run:
            rows, operators = run.task_rows(), run.archive.operator_rates()
            models, spend = run.archive.model_rates(), run.archive.llm_spend()
            children, migrations = run.archive.child_evaluation_count(), run.archive.migration_counts()
            pool = run.archive.meta(STATE_KEY)
            aside, fast_p, tolerance = run.archive.set_aside(), fast_p_rows(task_bests(run)), tolerance_of(run)
            phases = phase_line(run.archive.phase_totals())
            racing = racing_line(run.archive.timing_rounds())
            checked = timed_checks_line(run.archive.timed_checks())
            rejected = run.archive.rejections()
            per_task = run.config.run.budget.get("per_task")  # None too in runs made before the key
    except EvoError as exc:
        return _fail(str(exc))
    console = Console() if sys.stdout.isatty() else Console(width=160)  # logs and pipes: no wrapped tables
    console.print(status_table(rows, title=f"evo run {run.dir} ({run.info.get('device', '?')})"))
    console.print(fast_p_table(fast_p, tolerance))
    for task, row in aside.items():  # one line each, unwrapped: reasons are long
        console.print(f"task {task} set aside ({row['stage']}): {row['reason']}", soft_wrap=True, markup=False)
    console.print(operator_table(operators))
    if models:
        console.print(model_table(models))
    if pool:
        console.print(fragment_table(table(json.loads(pool))))
    cap = f" (at most {per_task} per task)" if per_task is not None else ""
    console.print(f"children evaluated: {children}{cap}; resumes: {run.info.get('resumes', 0)}; "
                  f"LLM calls: {spend['calls']}, {spend['errors']} failed (${spend['cost_usd']:.4f})")
    if rejected or spend["calls"]:  # novelty rejection judges the LLM's children
        console.print(novelty_line(rejected), soft_wrap=True, markup=False)
    if phases:
        console.print(phases, soft_wrap=True, markup=False)
    if racing:
        console.print(racing, soft_wrap=True, markup=False)
    if checked:
        console.print(checked, soft_wrap=True, markup=False)
    moved = ", ".join(f"{n} {kind}" for kind, n in migrations.items()) or "none"
    console.print(f"elites placed on other islands: {moved} (seeds are copied to every island)")
    contained = run.info.get("containment")
    console.print(describe(contained) if contained else "containment: not recorded (the run started before "
                  "evo recorded it)", soft_wrap=True, markup=False)
    return 0


EXPORT_USAGE = "evo export run.dir=DIR out=PATH [tasks=a,b] [min_speedup=X] [top_k=N]"


def export_command(args: list[str]) -> int:
    from evo.views.export import ExportOptions, export_run
    from evo.views.run_view import open_run

    try:
        picked = _run_args(args, EXPORT_USAGE, {"tasks", "min_speedup", "top_k"}, {"out"})
        options = ExportOptions.parse(picked.get("tasks"), picked.get("min_speedup"), picked.get("top_k"))
        with open_run(picked["run.dir"]) as run:
            changes = export_run(run, Path(picked["out"]), options)
    except EvoError as exc:
        return _fail(str(exc))
    for change in changes:
        print(change)
    print(f"exported to {Path(picked['out']).expanduser().resolve()}")
    return 0


def report_command(args: list[str]) -> int:
    from evo.views.report import write_report
    from evo.views.run_view import open_run

    try:
        picked = _run_args(args, "evo report run.dir=DIR [out=DIR]", {"out"})
        with open_run(picked["run.dir"]) as run:
            page = write_report(run, Path(picked["out"]) if "out" in picked else run.dir / "report")
    except EvoError as exc:
        return _fail(str(exc))
    print(f"report: {page}")
    return 0


COMMANDS = {"eval": eval_command, "status": status_command, "export": export_command, "report": report_command}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = args[0], args[1:]
    if command == "run":
        sys.argv = [f"{Path(sys.argv[0]).name} run", *rest]
        _run_main()
        return 0
    if command in COMMANDS:
        return COMMANDS[command](rest)
    return _fail(f"unknown command {command!r}\n{USAGE}")


if __name__ == "__main__":
    sys.exit(main())

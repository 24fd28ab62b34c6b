"""The ``evo`` command: ``run`` (Hydra), ``eval`` and ``status``.

    evo run [key=value ...]            start or resume a search (Hydra overrides; -m for sweeps)
    evo eval task=PATH candidate=PATH  evaluate one candidate; the last line printed is JSON
    evo status run.dir=DIR             the table of a running or finished run
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from evo.errors import EvoError

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
    def run(cfg) -> None:
        from evo.config import build, to_yaml
        from evo.runner import run_search

        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode == RunMode.MULTIRUN:  # every sweep job gets its own run dir under hydra.sweep.dir
            cfg.run.dir = hydra_cfg.runtime.output_dir
        try:
            run_search(build(cfg), to_yaml(cfg))
        except EvoError as exc:
            sys.exit(_fail(str(exc)))

    run()


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
    from evo.config import instantiate_node
    from evo.task import load_task

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
    except (EvoError, RuntimeError) as exc:
        return _fail(str(exc))
    evaluator = Evaluator(settings, device, 0 if device == "cuda" else None)
    try:
        check = evaluator.check_task(task.name, task.source)
        if not check.get("ok"):
            return _fail(f"the reference of task {task.name} ({task.path}) failed: {check.get('error')}")
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


def status_command(args: list[str]) -> int:
    from omegaconf import OmegaConf

    from archive import Archive
    from evo.descriptors import by_names
    from evo.runner import RUN_FILE
    from evo.summary import summary_rows, summary_table

    picked, rest = _key_values(args, {"run.dir"})
    if "run.dir" not in picked or rest:
        return _fail("usage: evo status run.dir=DIR")
    run_dir = Path(picked["run.dir"]).expanduser().resolve()
    marker = run_dir / RUN_FILE
    if not marker.is_file():
        return _fail(f"{run_dir} holds no evo run (no {RUN_FILE})")
    try:
        info = json.loads(marker.read_text())
        descriptors = by_names(OmegaConf.load(run_dir / "config.yaml").archive.descriptors)
        archive = Archive(f"sqlite:///{run_dir / 'archive.db'}", descriptors=descriptors)
        rows = summary_rows(archive, info["tasks"])
        spend = archive.llm_spend()
    except (EvoError, ValueError, KeyError, OSError) as exc:
        return _fail(f"cannot read the run in {run_dir}: {exc}")
    console = Console()
    console.print(summary_table(rows, title=f"evo run {run_dir} ({info.get('device', '?')})"))
    console.print(f"children evaluated: {archive.child_evaluation_count()}; resumes: {info.get('resumes', 0)}; "
                  f"LLM calls: {spend['calls']} (${spend['cost_usd']:.4f})")
    archive.close()
    return 0


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
    if command == "eval":
        return eval_command(rest)
    if command == "status":
        return status_command(rest)
    return _fail(f"unknown command {command!r}\n{USAGE}")


if __name__ == "__main__":
    sys.exit(main())

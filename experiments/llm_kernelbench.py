"""Measure a model on KernelBench: a search with a fixed budget of LLM calls per problem, scored as the
field reports it (issue 35, deliverable 3).

    python experiments/llm_kernelbench.py KERNELBENCH_DIR --model MODEL [--api-key-env VAR] \\
        [--api-base URL] [--calls-per-problem 10] [--problems 'level1/*' ...] [--limit N] \\
        [--out DIR] [--device auto|cuda|cpu] [--tolerance kernelbench|strict] [--timeout-s S] \\
        [-- more evo run overrides]

KERNELBENCH_DIR is the folder that holds ``level1/``, ``level2/``, ... (``KernelBench/KernelBench`` in
its repository), one level's folder, or a single problem file.  Each problem is one ``evo run`` of its
own (``--out/runs/<level>/<problem>``) with ``llm.budget.calls`` = ``--calls-per-problem`` (the LLM's
first kernels and their repairs included), LLM operators only and no torch.compile seeds unless asked
(``--offline``, ``--compile-seeds``): the figures are the model's.  Outputs are checked with
KernelBench's tolerances (atol = rtol = 1e-2) where a problem sets none, as its published fast_p.

Per problem: correct or not, the fastest correct kernel's speedup over eager and over torch.compile,
LLM requests, tokens and dollars (the run's ``llm_calls``).  Per level and for all: fast_0, fast_1,
fast_1.5, fast_2 over eager and over torch.compile, geometric means (``evo.views.fast_p``), tokens and
dollars per problem.  Writes ``results.json`` and ``results.md`` under ``--out`` with the command,
model, device, date and engine version, and prints the tables.  A problem with a record under
``--out/problems`` is skipped (resume: run the same command again); one whose run was cut off is
resumed from its run dir.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from evo.core.task import REQUIRED_NAMES  # noqa: E402
from evo.views.fast_p import P_VALUES, task_bests, tolerance_of  # noqa: E402
from evo.views.run_view import open_run  # noqa: E402
from experiments.llm_kernelbench_tables import summarize, write_results  # noqa: E402

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
SCRIPTED_WARNING = ("WARNING: the replies are scripted (--scripted): these figures measure the benchmark's "
                    "plumbing, not a model.")
LOCAL_WARNING = ("WARNING: the endpoint {api_base} is on this machine: if it serves scripted replies (such as "
                 "tests/support/llm_server.py), these figures measure the benchmark's plumbing, not a model.")
CPU_NOTE = ("device cpu: kernels run in Triton's interpreter, so only correctness means anything here; "
            "speedups and fast_1, fast_2 do not.")


def problem_files(folder: Path, patterns: list[str], limit: int | None) -> list[Path]:
    """The problem files of ``folder``'s ``level*`` folders (at any depth: KernelBench's repository works
    too), or of ``folder`` itself without them, in level and problem-number order; with ``patterns``,
    those whose ``<level>/<file>`` or file name matches one."""
    if folder.is_file():
        return [folder]
    levels = sorted(p for p in folder.rglob("level*") if p.is_dir())
    candidates = [f for level in levels for f in level.glob("*.py")] if levels else list(folder.glob("*.py"))

    def order(path: Path):
        number = re.match(r"\d+", path.name)
        return (str(path.parent), int(number.group()) if number else 0, path.name)

    found = []
    for path in sorted(candidates, key=order):
        named = f"{path.parent.name}/{path.name}"
        if path.name.startswith("_") or (patterns and not any(fnmatch.fnmatch(named, p) or
                                                              fnmatch.fnmatch(path.name, p) for p in patterns)):
            continue
        source = path.read_text(encoding="utf-8", errors="replace")
        if all(re.search(rf"^(class|def) {name}\b", source, re.MULTILINE) for name in REQUIRED_NAMES):
            found.append(path)
    return found[:limit] if limit else found


def offline_operator_overrides() -> list[str]:
    """Overrides that switch off every operator that needs no LLM (its weight, and a sweep's children):
    what the model is measured on is then its own kernels."""
    from hydra import compose, initialize_config_module
    from hydra.utils import get_class

    with initialize_config_module(config_module="conf", version_base="1.3"):
        cfg = compose(config_name="config")
    out = []
    for name, entry in cfg.operators.items():
        if getattr(get_class(entry.operator._target_), "needs_llm", False):
            continue
        out.append(f"operators.{name}.weight=0")
        if "max_children" in entry.operator:
            out.append(f"operators.{name}.operator.max_children=0")
    return out


def _quoted(value: str) -> str:
    """A Hydra override value: quoted where it holds characters the override grammar reads."""
    return value if re.fullmatch(r"[\w./:@+-]+", value) else "'" + value.replace("'", "\\'") + "'"


def run_overrides(args, offline_off: list[str]) -> list[str]:
    n = args.calls_per_problem
    keys = [f"llm.model={_quoted(args.model)}", f"llm.budget.calls={n}",
            # Every child costs a request, so the calls end the run; seeds are outside this budget.
            f"run.budget.evaluations={n}",
            # The model's first kernels may take the whole budget, one attempt (or repair) at a time.
            f"run.llm_seed_attempts={n}", "run.llm_seeds=1",
            f"evaluator.device={args.device}", f"evaluator.tolerance={args.tolerance}", "run.progress=false"]
    if args.api_base:
        keys.append(f"llm.api_base={_quoted(args.api_base)}")
    if args.api_key_env:
        keys.append(f"llm.api_key_env={args.api_key_env}")
    if not args.compile_seeds:
        keys.append("run.compile_seeds=false")
    if not args.offline:
        keys += offline_off
    return keys + args.overrides


def _error(log: str) -> str:
    """What ``evo`` said on failing: the text from its last ``error:`` on, or the log's last line."""
    at = log.rfind("error: ")
    while at > 0 and log[at - 1] != "\n":
        at = log.rfind("error: ", 0, at)
    return log[at + len("error: "):].strip() if at >= 0 else (log.strip().splitlines() or [""])[-1]


def _evo_run(command: list[str], log_path: Path, timeout_s: float | None) -> tuple[int | None, bool]:
    """(exit code, timed out).  Past ``timeout_s`` the run gets Ctrl-C, which ends its evaluations and
    islands (and a Ray of its own) cleanly; a kill only if it has not exited a minute later."""
    with open(log_path, "a") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            return process.wait(timeout=timeout_s), False
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            return None, True


def run_problem(path: Path, out: Path, keys: list[str], timeout_s: float | None) -> dict:
    """One ``evo run`` of one problem, then its record read from the run dir (read-only views)."""
    group, name = path.parent.name, path.stem  # a level is the problem file's folder, as for evo.views.fast_p
    run_dir, log_path = out / "runs" / group / name, out / "logs" / group / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "evo.cli", "run", f"run.dir={run_dir}", f"task.path={path}", *keys]
    began = time.time()
    code, timed_out = _evo_run(command, log_path, timeout_s)
    if code == 130:  # Ctrl-C: this problem has no record, so the same command resumes it
        raise KeyboardInterrupt
    text = log_path.read_text(errors="replace")
    row = dict(problem=f"{group}/{name}", group=group, task=name, path=str(path), exit=code,
               timed_out=timed_out, wall_s=round(time.time() - began, 1), run_dir=str(run_dir),
               log=str(log_path), command=shlex.join(["evo", *command[3:]]), correct=False, speedup=None,
               speedup_vs_compiled=None, set_aside=None, llm_calls=0, llm_errors=0, prompt_tokens=0,
               completion_tokens=0, usd=0.0, evaluations=0, correct_evaluations=0, device=None, device_kind=None,
               error=None)
    if not (run_dir / "run.json").is_file():  # the run never started: a problem-specific or a fatal failure
        error = _error(text)
        if timed_out or error.startswith("nothing to search"):  # the reference failed, or ran out of time
            return dict(row, set_aside="; ".join(error.splitlines()[1:]) or error, error=error)
        raise SystemExit(f"`{row['command']}` failed before its search started: {error}\n(log: {log_path})")
    with open_run(run_dir) as run:
        (best,) = task_bests(run)
        spend, counts = run.archive.llm_spend(), run.archive.task_counts().get(name, {})
        aside = run.archive.set_aside().get(name)
        kernels = run.archive.best_kernels(name, 1)
        row.update(correct=best["speedup"] is not None, speedup=best["speedup"],
                   speedup_vs_compiled=best["speedup_vs_compiled"],
                   set_aside=f"{aside['stage']}: {aside['reason']}" if aside else None,
                   llm_calls=spend["calls"], llm_errors=spend["errors"], prompt_tokens=spend["prompt_tokens"],
                   completion_tokens=spend["completion_tokens"], usd=float(spend["cost_usd"]),
                   evaluations=counts.get("evaluations", 0), correct_evaluations=counts.get("correct", 0),
                   device=kernels[0]["device"] if kernels else None, device_kind=run.info.get("device"),
                   tolerance=tolerance_of(run), engine=run.archive.meta("code_version.0"))
    if code not in (0, None):
        row["error"] = _error(text)
    return row


def same_settings(out: Path, keys: list[str]) -> None:
    """Records under ``out`` are kept only for the search they were made with: the ``evo run`` keys,
    where the endpoint is (its port, say) aside.  Saved with the first run, compared on each later one."""
    search = [k for k in keys if not k.startswith(("llm.api_base=", "llm.api_key_env="))]
    saved = out / "settings.json"
    if not saved.is_file():
        saved.write_text(json.dumps({"evo_run": search}, indent=1))
        return
    before = json.loads(saved.read_text())["evo_run"]
    if before != search:
        changed = sorted(set(before) ^ set(search))
        raise SystemExit(f"{out} holds results of another search ({', '.join(changed)} differ): give another "
                         "--out, or the same settings to go on with it")


def warnings_for(args) -> list[str]:
    out = []
    if args.scripted:
        out.append(SCRIPTED_WARNING)
    elif args.api_base and (urlparse(args.api_base).hostname or "") in LOCAL_HOSTS:
        out.append(LOCAL_WARNING.format(api_base=args.api_base))
    if args.device == "cpu":
        out.append(CPU_NOTE)
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="KernelBench's folder of levels, a level's folder, or one file")
    parser.add_argument("--model", required=True, help="a litellm model name (openai/<name> with --api-base)")
    parser.add_argument("--api-base", help="an OpenAI-compatible endpoint (vLLM, Ollama, ...)")
    parser.add_argument("--api-key-env", help="the environment variable holding the API key (never the key)")
    parser.add_argument("--calls-per-problem", type=int, default=10, help="LLM requests per problem (default 10)")
    parser.add_argument("--problems", nargs="*", default=[],
                        help="glob patterns on the path under FOLDER or the file name, e.g. 'level1/*' '19_*'")
    parser.add_argument("--limit", type=int, help="the first N problems (after --problems)")
    parser.add_argument("--out", type=Path, help="results and run dirs (default runs/llm_kernelbench/<model>)")
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--tolerance", default="kernelbench", choices=("kernelbench", "strict"),
                        help="where a problem sets none: KernelBench's atol = rtol = 1e-2, as its published fast_p "
                             "(default), or the engine's strict ones")
    parser.add_argument("--timeout-s", type=float, help="wall-clock limit per problem (its run is then stopped)")
    parser.add_argument("--offline", action="store_true", help="keep the offline operators (confounds the model)")
    parser.add_argument("--compile-seeds", action="store_true",
                        help="start from torch.compile's Triton on a GPU (confounds the model)")
    parser.add_argument("--scripted", action="store_true", help="the endpoint's replies are scripted (tests)")
    args = parser.parse_args(argv)
    args.overrides = overrides
    if args.calls_per_problem < 1:
        parser.error("--calls-per-problem must be at least 1")
    args.out = args.out or Path("runs") / "llm_kernelbench" / re.sub(r"[^\w.-]+", "_", args.model)
    return args


def main(argv: list[str] | None = None) -> int:
    command = ["python", *sys.argv] if argv is None else ["python", str(Path(__file__).relative_to(ROOT)), *argv]
    args = parse(sys.argv[1:] if argv is None else argv)
    folder = args.folder.expanduser().resolve()
    files = problem_files(folder, args.problems, args.limit)
    if not files:
        raise SystemExit(f"no KernelBench problem files under {folder} match {args.problems or 'any pattern'}")
    out = args.out.expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    keys = run_overrides(args, offline_operator_overrides())
    same_settings(out, keys)
    warnings = warnings_for(args)
    for line in warnings:
        print(line, flush=True)
    rows = []
    for n, path in enumerate(files, 1):
        group = path.parent.name
        record = out / "problems" / group / f"{path.stem}.json"
        if record.is_file():
            rows.append(json.loads(record.read_text()))
            print(f"[{n}/{len(files)}] {group}/{path.stem}: done before, kept", flush=True)
            continue
        print(f"[{n}/{len(files)}] {group}/{path.stem} ...", flush=True)
        row = run_problem(path, out, keys, args.timeout_s)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(row, indent=1))
        rows.append(row)
        verdict = "correct" if row["correct"] else "no correct kernel"
        print(f"    {verdict}; {row['llm_calls']} LLM requests, ${row['usd']:.4f}, {row['wall_s']} s", flush=True)
    meta = dict(command=shlex.join(command), python=sys.executable, model=args.model, api_base=args.api_base,
                calls_per_problem=args.calls_per_problem, folder=str(folder), problems=args.problems,
                limit=args.limit, device=args.device, overrides=args.overrides, evo_run_overrides=keys,
                date=datetime.now(timezone.utc).isoformat(timespec="seconds"), warnings=warnings,
                search=("LLM operators only" if not args.offline else "LLM and offline operators") + "; "
                + ("seeds from torch.compile on a GPU" if args.compile_seeds else "first kernels written by the LLM"),
                p_values=list(P_VALUES))
    write_results(out, summarize(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())

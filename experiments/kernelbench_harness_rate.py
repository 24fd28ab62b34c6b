"""KernelBench's own harness on our candidates: its verdicts and its evaluations per minute (issue 16 D6).

For each chosen problem file, the candidate (a Triton ``ModelNew``) is evaluated by KernelBench's
``kernelbench.eval.eval_kernel_against_ref`` (backend "triton", measure_performance=True, its default
num_correct_trials / num_perf_trials / timing method, on cuda:0), one candidate after another in this
process, as KernelBench's single-sample evaluation does.  Per candidate: the wall seconds of that call
and its verdict (compiled, correctness, runtime and ref runtime in milliseconds, as KernelBench's timing
gives them whatever its result type's comment says, error); totals: evaluations per minute and the median
wall per evaluation.  JSON goes to --out (rewritten after every candidate), a markdown summary to stdout;
KernelBench's own prints go to stderr.

Setup (on this machine, from the project root):
    bash experiments/kernelbench_harness_setup.sh            # KernelBench's src/kernelbench -> .kbsrc/
    bash ../shared/device/wheelhouse.sh "pydantic==2.14.4" "pydantic-core==2.50.5" typing-inspection \\
        annotated-types "typing-extensions>=4.16" requests
KernelBench's eval path needs pydantic (its result type, KernelExecResult, is a pydantic model), hence
those wheels; requests is only imported by eval.py (a stand-in is used when it is absent, see
``_stand_in_unused_imports``), it is listed so that the real module is there.

On the GPU host (carry [".whl", ".kb", ".h_kb", ".kbsrc"], about 50 MB together):
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
      .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site && \\
    TRITON_CACHE_DIR=/tmp/kb_triton_cache python3 experiments/kernelbench_harness_rate.py \\
      --problems .kb/level1 .kb/level2 \\
      --seeds-from .h_kb/derive1.json .h_kb/derive2.json \\
      --only '^(level1/(19_ReLU|23_Softmax|24_LogSoftmax|40_LayerNorm|88_MinGPTNewGelu)|level2/76_Gemm_Add_ReLU)$' \\
      --out $OUT/kernelbench_harness_rate.json

Triton's compiled-kernel cache is keyed by the kernel's source: a fresh TRITON_CACHE_DIR keeps this
run's compilations cold when our evaluator has compiled the same candidates earlier in that device call.

Candidates come either from --seeds-from (JSON files {"meta":..., "problems":[{"name", "seed", ...}]};
a later file's non-empty seed wins) or from --candidates DIR holding NAME.py, where NAME is the
problem's name (DIR/level1/19_ReLU.py) or its file stem (DIR/19_ReLU.py).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import os
import re
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What KernelBench's eval call is asked for; everything else stays at its defaults (recorded in meta).
BACKEND = "triton"
DEVICE_INDEX = 0
ERROR_KEYS = ("compilation_error", "runtime_error", "correctness_issue", "error_during_performance",
              "other_error")


def problem_name(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def problem_files(items: list[str]) -> list[Path]:
    files = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            files.extend(sorted(path.glob("*.py")))
        elif path.is_file():
            files.append(path)
        else:
            sys.exit(f"no such problem file or folder: {item}")
    return files


def seeds_from(json_files: list[str]) -> dict[str, str]:
    seeds: dict[str, str] = {}
    for json_file in json_files:
        for entry in json.loads(Path(json_file).read_text())["problems"]:
            if entry.get("seed"):
                seeds[entry["name"]] = entry["seed"]
    return seeds


def candidates_from(folder: str, names: list[str]) -> dict[str, str]:
    found = {}
    for name in names:
        for path in (Path(folder) / f"{name}.py", Path(folder) / f"{name.split('/')[-1]}.py"):
            if path.is_file():
                found[name] = path.read_text()
                break
    return found


def _stand_in_unused_imports() -> list[str]:
    """Modules KernelBench imports at module level but never calls on eval_kernel_against_ref's path.

    kernelbench/__init__ imports kernelbench.utils (it registers torch.rand_mix, which stays real);
    utils imports python-dotenv (load_dotenv() reads a .env for its LLM client), tqdm, openai and
    litellm, used only by its LLM-query and batch helpers; eval.py imports requests and never uses it.
    The LLM clients (openai, litellm) always get an empty stand-in (any call on it raises): the host
    needs no LLM client wheels, and litellm's import would try to fetch a price list over the network.
    The small ones are used when installed, else stood in likewise.
    """
    def refuse(*_args, **_kwargs):
        raise RuntimeError("stand-in for a module KernelBench's eval path does not use")

    names = {"dotenv": {"load_dotenv": lambda *a, **k: False}, "tqdm": {"tqdm": refuse},
             "openai": {"OpenAI": refuse}, "litellm": {"completion": refuse}, "requests": {}}
    stood_in = []
    for name, attributes in names.items():
        if name in ("openai", "litellm") or importlib.util.find_spec(name) is None:
            module = types.ModuleType(name)
            module.__dict__.update(attributes)
            sys.modules[name] = module
            stood_in.append(name)
    return stood_in


def import_kernelbench(kbsrc: Path):
    if not (kbsrc / "kernelbench" / "eval.py").is_file():
        sys.exit(f"KernelBench is not at {kbsrc}/kernelbench: run experiments/kernelbench_harness_setup.sh")
    sys.path.insert(0, str(kbsrc))
    stood_in = _stand_in_unused_imports()
    try:
        from kernelbench import eval as kb_eval
    except ImportError as error:
        sys.exit(f"cannot import KernelBench's eval ({error}); see this script's docstring for the wheels")
    commit = (kbsrc / "COMMIT").read_text().strip() if (kbsrc / "COMMIT").is_file() else None
    return kb_eval, stood_in, commit


def _plain(value, limit: int = 4000):
    """Metadata holds exceptions and tensors: keep JSON-able values, the rest as (bounded) text."""
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, limit) for v in value]
    return str(value)[:limit]


def verdict(result) -> dict:
    if result is None:  # KernelBench's answer to a lock-file clash while compiling: "please retry"
        return dict(compiled=None, correctness=None, runtime_ms=None, ref_runtime_ms=None,
                    error="eval_kernel_against_ref returned None (lock file error: retry)")
    metadata = _plain(dict(result.metadata))
    errors = [f"{key}: {metadata[key]}" for key in ERROR_KEYS if key in metadata]
    return dict(compiled=result.compiled, correctness=result.correctness,
                runtime_ms=result.runtime if result.runtime >= 0 else None,
                ref_runtime_ms=result.ref_runtime if result.ref_runtime >= 0 else None,
                runtime_stats=_plain(result.runtime_stats), ref_runtime_stats=_plain(result.ref_runtime_stats),
                error="\n".join(errors) or None, metadata=metadata)


def totals(rows: list[dict]) -> dict:
    walls = [row["wall_s"] for row in rows]
    return dict(evaluations=len(rows), eval_wall_s=round(sum(walls), 3),
                evaluations_per_minute=round(60 * len(walls) / sum(walls), 2) if walls else None,
                median_wall_s=round(statistics.median(walls), 3) if walls else None,
                correct=sum(bool(row.get("correctness")) for row in rows))


def markdown(report: dict) -> str:
    lines = [f"KernelBench {report['meta']['kernelbench_commit']} eval_kernel_against_ref on "
             f"{report['meta'].get('device')}, {report['meta']['eval_arguments']}", "",
             "| problem | wall s | compiled | correct | runtime ms | ref ms | speedup | error |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: | --- |"]
    for row in report["candidates"]:
        runtime, ref = row.get("runtime_ms"), row.get("ref_runtime_ms")
        speedup = f"{ref / runtime:.2f}" if runtime and ref else ""
        error = (row.get("error") or "").splitlines()[0][:80] if row.get("error") else ""
        lines.append(f"| {row['name']} | {row['wall_s']:.2f} | {row.get('compiled')} | {row.get('correctness')} "
                     f"| {runtime if runtime is not None else ''} | {ref if ref is not None else ''} "
                     f"| {speedup} | {error} |")
    t = report["totals"]
    lines += ["", f"{t['evaluations']} evaluations, {t['correct']} correct: {t['evaluations_per_minute']} per minute, "
              f"median {t['median_wall_s']} s per evaluation (CUDA start-up {report['meta'].get('cuda_init_s')} s "
              "not counted)"]
    return "\n".join(lines)


def write(report: dict, out: Path) -> None:
    report["totals"] = totals(report["candidates"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", required=True, help="KernelBench problem files or folders")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--seeds-from", nargs="+", help="derive JSON files whose entries hold a seed")
    source.add_argument("--candidates", help="folder of NAME.py candidates")
    parser.add_argument("--only", help="regular expression on problem names (level1/19_ReLU)")
    parser.add_argument("--out", required=True, help="JSON result file")
    parser.add_argument("--kbsrc", default=str(ROOT / ".kbsrc"), help="folder holding kernelbench/")
    args = parser.parse_args(argv)

    files = [f for f in problem_files(args.problems) if not args.only or re.search(args.only, problem_name(f))]
    names = [problem_name(f) for f in files]
    sources = seeds_from(args.seeds_from) if args.seeds_from else candidates_from(args.candidates, names)
    chosen = [(name, f) for name, f in zip(names, files) if name in sources]
    for name in sorted(set(names) - set(sources)):
        print(f"no candidate for {name}: skipped", file=sys.stderr)
    if not chosen:
        sys.exit("no problem has a candidate")
    kb_eval, stood_in, commit = import_kernelbench(Path(args.kbsrc))

    import torch
    if not torch.cuda.is_available():
        sys.exit(f"{len(chosen)} candidates loaded, KernelBench imported; but its eval needs a CUDA GPU "
                 "and torch sees none: run this on the GPU host")
    defaults = {k: p.default for k, p in inspect.signature(kb_eval.eval_kernel_against_ref).parameters.items()
                if k in ("seed_num", "num_correct_trials", "num_perf_trials", "timing_method", "precision",
                         "check_for_excessive_speedup")}
    began = time.perf_counter()
    torch.zeros(1, device=f"cuda:{DEVICE_INDEX}")  # CUDA context up before the first timed call
    torch.cuda.synchronize()
    report = dict(meta=dict(command=" ".join(sys.argv), kernelbench_commit=commit, stand_ins=stood_in,
                            triton_cache_dir=os.environ.get("TRITON_CACHE_DIR"), torch=torch.__version__, device=torch.cuda.get_device_name(DEVICE_INDEX),
                            cuda_init_s=round(time.perf_counter() - began, 3),
                            eval_arguments=dict(_plain(defaults), backend=BACKEND, measure_performance=True,
                                                device=DEVICE_INDEX)),
                  candidates=[])
    try:
        import triton
        report["meta"]["triton"] = triton.__version__
    except ImportError:
        pass
    out = Path(args.out)
    for name, path in chosen:
        start = time.perf_counter()
        try:
            with contextlib.redirect_stdout(sys.stderr):  # its prints stay apart from the summary
                result = kb_eval.eval_kernel_against_ref(path.read_text(), sources[name], measure_performance=True,
                                                         device=DEVICE_INDEX, backend=BACKEND)
            row = verdict(result)
        except Exception as error:  # KernelBench raises for a reference it cannot load or run
            row = dict(compiled=None, correctness=None, runtime_ms=None, ref_runtime_ms=None,
                       error=f"eval_kernel_against_ref raised {type(error).__name__}: {error}"[:4000])
        row = dict(name=name, path=str(path), wall_s=round(time.perf_counter() - start, 3), **row)
        report["candidates"].append(row)
        write(report, out)
        print(f"{name}: {row['wall_s']:.2f} s compiled={row['compiled']} correct={row['correctness']}",
              file=sys.stderr, flush=True)
    write(report, out)
    print(markdown(report))


if __name__ == "__main__":
    main()

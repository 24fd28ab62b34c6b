"""`evo export`: a run's best kernels as a Python package that needs only torch and triton.

The package (``out=PATH``; its name is the last path component)::

    PATH/__init__.py       TASKS: task name -> module
    PATH/<task>.py         REFERENCE_SOURCE and ``<task>(...)``, with the reference forward's arguments
    PATH/kernels/<k>.py    each kernel's source, as evaluated
    PATH/manifest.json     per task: kernels (speedups, roofline fraction, device, versions,
                           source hashes, lineage ids) and buckets (which kernel serves which
                           device class and input size); the history of exports
    PATH/_runtime.py       dispatch;  PATH/selftest.py: ``python -m PACKAGE.selftest``

Exporting into an existing library merges: per task, device class and shape
bucket, a kernel leaves only for a faster one (at least ``top_k`` are kept),
and what left is kept in the manifest's history.  Shapes are not searched
separately yet, so every kernel serves the bucket ``all``.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import keyword
import os
import platform
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import jinja2

from evo.errors import ConfigError, EvoError
from evo.run_view import RunView
from evo.task import Task

FORMAT, FORMAT_VERSION = "evo-kernel-library", 1
TEMPLATES = Path(__file__).parent / "templates" / "export"
STATIC_FILES = ("_runtime.py", "selftest.py")
RESERVED = {"_runtime", "selftest", "kernels", "manifest"}
ALL_SHAPES = dict(bucket="all", max_numel=None)  # the one bucket while shapes are not searched separately


def _runtime_module():
    """The exported packages' ``_runtime`` (for ``device_class``): one definition for engine and library."""
    spec = importlib.util.spec_from_file_location("evo_export_runtime", TEMPLATES / "_runtime.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class ExportOptions:
    tasks: tuple[str, ...] | None = None
    min_speedup: float | None = None
    top_k: int = 1

    @classmethod
    def parse(cls, tasks: str | None, min_speedup: str | None, top_k: str | None) -> "ExportOptions":
        try:
            names = tuple(n.strip() for n in tasks.strip("[]").split(",") if n.strip()) if tasks else None
            k = int(top_k) if top_k is not None else 1
            floor = float(min_speedup) if min_speedup is not None else None
        except ValueError as exc:
            raise ConfigError(f"evo export: {exc}; top_k is an integer, min_speedup a number") from None
        if k < 1:
            raise ConfigError(f"evo export: top_k must be at least 1, got {k}")
        return cls(tasks=names, min_speedup=floor, top_k=k)


def _module_name(task: str, taken: set[str]) -> str:
    name = re.sub(r"\W", "_", task)
    if not name.isidentifier() or keyword.iskeyword(name) or name in RESERVED or name.startswith("_"):
        name = f"task_{name}"
    base, n = name, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def forward_signature(reference_source: str) -> tuple[str, str]:
    """(parameters, call arguments) of the reference's ``Model.forward`` without ``self``."""
    tree = ast.parse(reference_source)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        return "*args, **kwargs", "*args, **kwargs"
    args = forward.args
    posonly, regular = (args.posonlyargs[1:], args.args) if args.posonlyargs else ([], args.args[1:])
    params = ast.arguments(posonlyargs=posonly, args=regular, vararg=args.vararg, kwonlyargs=args.kwonlyargs,
                           kw_defaults=args.kw_defaults, kwarg=args.kwarg, defaults=args.defaults)
    call = [a.arg for a in [*posonly, *regular]]
    call += [f"*{args.vararg.arg}"] if args.vararg else []
    call += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    call += [f"**{args.kwarg.arg}"] if args.kwarg else []
    return ast.unparse(params), ", ".join(call)


def read_library(out: Path) -> dict | None:
    """The manifest of the library at ``out``; None if there is none yet; EvoError if ``out`` is something else."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return None
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8")) if out.is_dir() else None
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise EvoError(f"{out} exists and is not a kernel library exported by evo (no {FORMAT} manifest.json): "
                       "choose another out= path; nothing was written")
    if manifest.get("format_version", 0) > FORMAT_VERSION:
        raise EvoError(f"the library {out} was written by a newer evo (format {manifest['format_version']})")
    return manifest


def _kernel_entry(run: RunView, task: Task, module: str, row: dict, versions: dict, device_class) -> dict:
    return dict(
        module=module, **ALL_SHAPES, device=row["device"], device_class=device_class(row["device"]),
        speedup=row["speedup"], speedup_vs_compiled=row["speedup_vs_compiled"],
        roofline_fraction=row["roofline_fraction"], speedup_noise=row["speedup_noise"],
        runtime_ms=row["runtime_ms"], ref_runtime_ms=row["ref_runtime_ms"],
        timing_representative=bool(row["timing_representative"]),
        source_hash=row["source_hash"], source_sha256=hashlib.sha256(row["source"].encode()).hexdigest(),
        reference_hash=task.source_hash, program_id=row["id"], operator=row["operator"],
        lineage=run.archive.lineage(row["id"]), run=str(run.dir), evaluated_at=row["created_at"], **versions)


def merge_kernels(old: list[dict], new: list[dict], top_k: int) -> tuple[list[dict], list[dict]]:
    """(kept, dropped): per device class and bucket the fastest, at least ``top_k`` and as many as before.

    An old kernel leaves only for faster ones: on ties the old one stays.
    """
    kept, dropped = [], []
    groups = dict.fromkeys((k["device_class"], k["bucket"]) for k in [*old, *new])
    for group in groups:
        olds = [k for k in old if (k["device_class"], k["bucket"]) == group]
        pool: dict[str, dict] = {}
        for k in [*olds, *(k for k in new if (k["device_class"], k["bucket"]) == group)]:
            if k["source_hash"] not in pool or k["speedup"] > pool[k["source_hash"]]["speedup"]:
                pool[k["source_hash"]] = k
        ranked = sorted(pool.values(), key=lambda k: -k["speedup"])  # stable: old first on ties
        kept += ranked[:max(top_k, len(olds))]
        dropped += [k for k in olds if k not in kept]
    return kept, dropped


def _buckets(kernels: list[dict]) -> list[dict]:
    best: dict[tuple, dict] = {}
    for k in kernels:
        key = (k["device_class"], k["bucket"], k["max_numel"])
        if key not in best or k["speedup"] > best[key]["speedup"]:
            best[key] = k
    return [dict(device_class=d, name=b, max_numel=m, kernel=k["module"]) for (d, b, m), k in best.items()]


def _changes(task: str, before: list[dict], after: list[dict], dropped: list[dict]) -> list[dict]:
    added = [k for k in after if not any(k is b for b in before)]
    out = [dict(task=task, action="added", kernel=k["module"], speedup=k["speedup"], device_class=k["device_class"])
           for k in added]
    out += [dict(task=task, action="dropped", kernel=k["module"], speedup=k["speedup"],
                 device_class=k["device_class"], entry=k) for k in dropped]
    return out


def _describe(change: dict) -> str:
    return (f"{change['task']}: {change['action']} {change['kernel']} "
            f"({change['speedup']:.3f}x on {change['device_class']})")


def export_run(run: RunView, out: Path, options: ExportOptions) -> list[str]:
    """Export the run's best kernels into the library at ``out``; returns one line per change."""
    out = out.expanduser().resolve()
    if not out.name.isidentifier() or keyword.iskeyword(out.name):
        raise EvoError(f"out={out}: the package name {out.name!r} must be a Python identifier")
    old = read_library(out)
    unknown = sorted(set(options.tasks or ()) - set(run.tasks))
    if unknown:
        raise EvoError(f"no task {', '.join(unknown)} in the run {run.dir}; it has {', '.join(run.tasks)}")
    tasks = [t for t in run.load_tasks() if options.tasks is None or t.name in options.tasks]
    manifest = old or dict(format=FORMAT, format_version=FORMAT_VERSION, package=out.name, tasks={}, history=[])
    runtime = _runtime_module()
    import torch
    import triton

    versions = dict(torch=torch.__version__, triton=triton.__version__, python=platform.python_version())
    sources, changes, skipped = {}, [], []
    for task in tasks:
        rows = run.archive.best_kernels(task.name, options.top_k, options.min_speedup)
        entry = manifest["tasks"].get(task.name)
        if entry is not None and entry["reference_hash"] != task.source_hash:
            raise EvoError(f"task {task.name} of {out} was exported from another version of its problem file "
                           f"(reference hash {entry['reference_hash']}, this run's {task.source_hash}): export "
                           "into another library, or leave the task out with tasks=; nothing was written")
        if not rows:
            skipped.append(task.name)
            continue
        if entry is None:
            taken = {e["module"] for e in manifest["tasks"].values()}
            signature, call = forward_signature(task.source)
            entry = manifest["tasks"][task.name] = dict(
                module=_module_name(task.name, taken), signature=signature, call=call,
                reference_hash=task.source_hash, kernels=[], buckets=[])
        new = [_kernel_entry(run, task, f"{entry['module']}_{r['source_hash'][:12]}", r, versions,
                             runtime.device_class) for r in rows]
        kept, dropped = merge_kernels(entry["kernels"], new, options.top_k)
        # Kernels the library keeps from before are copied as they are; only new ones are written.
        sources.update({k["module"]: r["source"] for k, r in zip(new, rows) if any(k is c for c in kept)})
        changes += _changes(task.name, entry["kernels"], kept, dropped)
        entry["kernels"], entry["buckets"] = kept, _buckets(kept)
    if len(skipped) == len(tasks):
        floor = f" with a speedup of at least {options.min_speedup}" if options.min_speedup is not None else ""
        raise EvoError(f"the run {run.dir} has no correct kernel{floor} for {', '.join(skipped)}; nothing written")
    manifest["history"].append(dict(
        at=time.time(), run=str(run.dir), tasks=[t.name for t in tasks], top_k=options.top_k,
        min_speedup=options.min_speedup, changes=changes, skipped=skipped, **versions))
    try:
        _write_package(out, manifest, sources, {t.name: t for t in tasks})
    except OSError as exc:
        raise EvoError(f"cannot write the library {out}: {exc}; it was left as it was") from None
    lines = [_describe(c) for c in changes] or ["no kernel changed: the library's kernels are at least as fast"]
    return lines + [f"{name}: no correct kernel to export" for name in skipped]


def _render_env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    env.filters["pyrepr"] = repr
    return env


def _write_package(out: Path, manifest: dict, sources: dict[str, str], tasks: dict[str, Task]) -> None:
    """Write the whole package beside ``out``, then swap it in: a failure leaves ``out`` as it was."""
    tmp = out.with_name(f".{out.name}.export-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        _write_files(tmp, out, manifest, sources, tasks)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        backup = out.with_name(f".{out.name}.export-old")
        shutil.rmtree(backup, ignore_errors=True)
        os.rename(out, backup)
        try:
            os.rename(tmp, out)
        except OSError:
            os.rename(backup, out)
            raise
        shutil.rmtree(backup)
    else:
        os.rename(tmp, out)


def _write_files(tmp: Path, out: Path, manifest: dict, sources: dict[str, str], tasks: dict[str, Task]) -> None:
    env = _render_env()
    (tmp / "kernels").mkdir(parents=True)
    package = manifest["package"] = out.name
    for name in STATIC_FILES:
        shutil.copyfile(TEMPLATES / name, tmp / name)
    (tmp / "kernels" / "__init__.py").write_text('"""Kernel sources, one module each (see manifest.json)."""\n')
    for name, entry in manifest["tasks"].items():
        module = entry["module"]
        if name in tasks:
            (tmp / f"{module}.py").write_text(env.get_template("task.py.jinja").render(
                task=name, package=package, function=module, signature=entry["signature"], call=entry["call"],
                reference_source=tasks[name].source))
        else:  # a task of an earlier export, untouched
            shutil.copyfile(out / f"{module}.py", tmp / f"{module}.py")
        for k in entry["kernels"]:
            target = tmp / "kernels" / f"{k['module']}.py"
            if k["module"] in sources:
                header = env.get_template("kernel_header.jinja").render(task=name, **k)
                target.write_text(header + sources[k["module"]], encoding="utf-8")
            else:
                shutil.copyfile(out / "kernels" / f"{k['module']}.py", target)
    (tmp / "__init__.py").write_text(env.get_template("__init__.py.jinja").render(
        package=package, tasks=[dict(module=e["module"], function=e["module"]) for e in manifest["tasks"].values()],
        task_modules={n: e["module"] for n, e in manifest["tasks"].items()}))
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")

"""`evo export`: a run's best kernels as a Python package that needs only torch and triton.

The package (``out=PATH``; its name is the last path component)::

    PATH/__init__.py       TASKS: task name -> module
    PATH/<task>.py         REFERENCE_SOURCE and ``<task>(...)``, with the reference forward's arguments
    PATH/kernels/<k>.py    each kernel's source, as evaluated
    PATH/manifest.json     per task: kernels (speedups, per-bucket speedups, roofline fraction,
                           device, versions, source hashes, lineage ids, the timed calls' checks)
                           and buckets (which kernel serves which device class and input size); the
                           history of exports
    PATH/_runtime.py       dispatch;  PATH/selftest.py: ``python -m PACKAGE.selftest``

Shape buckets: where the run timed every shape set of a task
(``evaluator.time_shapes=all``), each timed shape set is a bucket
(:mod:`evo.core.shape_buckets`) and gets the ``top_k`` kernels fastest on it; a
kernel serving several buckets is written once.  Otherwise the task has one
bucket, ``all``, whose speedup was timed on the largest shape set, so it
competes with the largest shape set's bucket: both serve ``max_numel=None``.

Exporting into an existing library merges: per task, device class and bucket
(its ``max_numel``), a kernel leaves only for one faster on that bucket (each
bucket keeps the largest ``top_k`` the task was exported with), and what left
is kept in the manifest's history.
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

from evo.core.errors import ConfigError, EvoError
from evo.core.shape_buckets import best_per_bucket, speedups_by_program
from evo.core.task import Task
from evo.views.run_view import RunView

# Format 2: a kernel lists its speedup per bucket (``shapes``); format 1 had one ``bucket`` per kernel.
FORMAT, FORMAT_VERSION = "evo-kernel-library", 2
TEMPLATES = Path(__file__).parents[1] / "templates" / "export"
STATIC_FILES = ("_runtime.py", "selftest.py")
RESERVED = {"_runtime", "selftest", "kernels", "manifest"}
ALL_SHAPES = "all"  # the one bucket of a task whose shape sets were not timed separately


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
    """(parameters, call arguments) of the reference's ``Model.forward`` without ``self``.

    The library's module imports only its runtime: annotations are dropped (``x: torch.Tensor`` would
    name torch there), and a default that is not a literal (``dim=DIM``, ``dtype=torch.float32``)
    becomes ``_runtime.DEFAULT``, which the runtime replaces with the reference's own default.
    """
    tree = ast.parse(reference_source)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        return "*args, **kwargs", "*args, **kwargs"
    args = forward.args
    posonly, regular = (args.posonlyargs[1:], args.args) if args.posonlyargs else ([], args.args[1:])

    def plain(arg: ast.arg | None) -> ast.arg | None:
        return None if arg is None else ast.arg(arg=arg.arg)

    def default(node: ast.expr | None) -> ast.expr | None:
        if node is None:
            return None
        try:
            ast.literal_eval(node)
            return node
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return ast.Attribute(value=ast.Name(id="_runtime"), attr="DEFAULT")

    params = ast.arguments(posonlyargs=[plain(a) for a in posonly], args=[plain(a) for a in regular],
                           vararg=plain(args.vararg), kwonlyargs=[plain(a) for a in args.kwonlyargs],
                           kw_defaults=[default(d) for d in args.kw_defaults],
                           kwarg=plain(args.kwarg), defaults=[default(d) for d in args.defaults])
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
    return _upgrade(manifest)


def _upgrade(manifest: dict) -> dict:
    """A format 1 manifest as format 2: each kernel's one bucket becomes its ``shapes`` list."""
    if manifest.get("format_version", 1) < 2:
        for entry in manifest["tasks"].values():
            for k in entry["kernels"]:
                k["shapes"] = [dict(bucket=k.pop("bucket", ALL_SHAPES), max_numel=k.pop("max_numel", None),
                                    speedup=k["speedup"], speedup_noise=k.get("speedup_noise"))]
            entry["buckets"] = _buckets(entry["kernels"])
            per_class = [k["device_class"] for k in entry["kernels"]]
            entry["top_k"] = max((per_class.count(c) for c in per_class), default=1)
        manifest["format_version"] = FORMAT_VERSION
    return manifest


def _candidates(run: RunView, task: str, options: ExportOptions) -> tuple[list[dict], dict[int, list[dict]]]:
    """(program rows to export, per program id the buckets it competes for with its speedup there).

    With shape timings: the ``top_k`` fastest on each bucket; without: the ``top_k`` fastest overall,
    for the bucket ``all``.
    """
    timings = run.archive.shape_timings(task)
    if not timings:
        rows = run.archive.best_kernels(task, options.top_k, options.min_speedup)
        return rows, {r["id"]: [dict(bucket=ALL_SHAPES, max_numel=None, speedup=r["speedup"],
                                     speedup_noise=r["speedup_noise"])] for r in rows}
    speedups = speedups_by_program(timings)
    chosen = {pid for best in best_per_bucket(speedups, options.top_k, options.min_speedup).values()
              for pid, _ in best}
    shapes = {pid: [dict(bucket=s.bucket.name, max_numel=s.bucket.max_numel, speedup=s.speedup,
                         speedup_noise=s.speedup_noise)
                    for s in speedups[pid] if options.min_speedup is None or s.speedup >= options.min_speedup]
              for pid in chosen}
    return run.archive.kernels(chosen), shapes


def _kernel_entry(run: RunView, task: Task, module: str, row: dict, shapes: list[dict], environment: dict | None,
                  device_class) -> dict:
    """A kernel's manifest entry; its versions are those of the evaluation that measured it (None
    where the run predates their recording: the history then names the exporting machine's)."""
    measured = {k: (environment or {}).get(k) for k in ("torch", "triton", "python")}
    return dict(
        module=module, device=row["device"], device_class=device_class(row["device"]),
        speedup=row["speedup"], speedup_vs_compiled=row["speedup_vs_compiled"],
        roofline_fraction=row["roofline_fraction"], speedup_noise=row["speedup_noise"],
        runtime_ms=row["runtime_ms"], ref_runtime_ms=row["ref_runtime_ms"], shapes=shapes,
        timing_representative=bool(row["timing_representative"]),
        source_hash=row["source_hash"], source_sha256=hashlib.sha256(row["source"].encode()).hexdigest(),
        reference_hash=task.source_hash, program_id=row["id"], operator=row["operator"],
        lineage=run.archive.lineage(row["id"]), run=str(run.dir), evaluated_at=row["created_at"],
        environment=environment, timed_checks=json.loads(row["timed_checks"]) if row["timed_checks"] else None,
        **measured)


def _environment(row: dict | None) -> dict | None:
    return None if row is None else {k: row[k] for k in ("gpu", "driver", "cuda", "torch", "triton", "python",
                                                          "engine")}


def _speedup_on(kernel: dict, group: tuple) -> dict | None:
    """The kernel's entry of ``shapes`` for the group (device class, max_numel), if it competes there."""
    if kernel["device_class"] != group[0]:
        return None
    return next((s for s in kernel["shapes"] if s["max_numel"] == group[1]), None)


def _groups(kernels: list[dict]) -> list[tuple]:
    """(device class, max_numel) of every bucket the kernels compete for, the largest bucket last."""
    groups = dict.fromkeys((k["device_class"], s["max_numel"]) for k in kernels for s in k["shapes"])
    return sorted(groups, key=lambda g: (g[0], g[1] is None, g[1] or 0))


def merge_kernels(old: list[dict], new: list[dict], top_k: int) -> tuple[list[dict], list[dict]]:
    """(kept, dropped): per device class and bucket the ``top_k`` fastest there; the rest is dropped.

    An old kernel leaves only for faster ones: on ties the old one stays.  The same kernel (source
    hash) on the same device class is kept once, as measured by whichever export found it faster.
    Callers pass at least the ``top_k`` the library was built with, so no bucket loses kernels.
    """
    pool: dict[tuple, dict] = {}
    for k in [*old, *new]:
        same = (k["device_class"], k["source_hash"])
        if same not in pool or k["speedup"] > pool[same]["speedup"]:
            pool[same] = k
    kept: list[dict] = []
    for group in _groups([*old, *new]):
        ranked = sorted((k for k in pool.values() if _speedup_on(k, group)),
                        key=lambda k: -_speedup_on(k, group)["speedup"])  # stable: old first on ties
        kept += [k for k in ranked[:top_k] if not any(k is c for c in kept)]
    dropped = [k for k in old if not any(k is c for c in kept)]
    return sorted(kept, key=lambda k: -k["speedup"]), dropped


def _buckets(kernels: list[dict]) -> list[dict]:
    """The dispatch table: per device class and bucket, the kernel fastest there."""
    out = []
    for group in _groups(kernels):
        best = max((k for k in kernels if _speedup_on(k, group)), key=lambda k: _speedup_on(k, group)["speedup"])
        on = _speedup_on(best, group)
        out.append(dict(device_class=group[0], name=on["bucket"], max_numel=group[1], kernel=best["module"],
                        speedup=on["speedup"], speedup_noise=on["speedup_noise"]))
    return out


def _changes(task: str, before: list[dict], after: list[dict], dropped: list[dict],
             buckets: list[dict]) -> list[dict]:
    added = [k for k in after if not any(k is b for b in before)]
    serves = {id(k): [b["name"] for b in buckets
                      if b["kernel"] == k["module"] and b["device_class"] == k["device_class"]] for k in added}
    out = [dict(task=task, action="added", kernel=k["module"], speedup=k["speedup"], device_class=k["device_class"],
                serves=serves[id(k)]) for k in added]
    out += [dict(task=task, action="dropped", kernel=k["module"], speedup=k["speedup"],
                 device_class=k["device_class"], entry=k) for k in dropped]
    return out


def _describe(change: dict) -> str:
    serves = change.get("serves")
    buckets = f"; serves {', '.join(serves)}" if serves and serves != [ALL_SHAPES] else ""
    return (f"{change['task']}: {change['action']} {change['kernel']} "
            f"({change['speedup']:.3f}x on {change['device_class']}{buckets})")


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
        rows, shapes = _candidates(run, task.name, options)
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
                reference_hash=task.source_hash, top_k=options.top_k, kernels=[], buckets=[])
        environments = run.archive.environments(r.get("environment_id") for r in rows)
        new = [_kernel_entry(run, task, f"{entry['module']}_{r['source_hash'][:12]}", r, shapes[r["id"]],
                             _environment(environments.get(r.get("environment_id"))), runtime.device_class)
               for r in rows]
        # Per bucket the library keeps as many kernels as the largest top_k it was exported with.
        entry["top_k"] = max(options.top_k, entry.get("top_k", 1))
        kept, dropped = merge_kernels(entry["kernels"], new, entry["top_k"])
        # Kernels the library keeps from before are copied as they are; only new ones are written.
        sources.update({k["module"]: r["source"] for k, r in zip(new, rows) if any(k is c for c in kept)})
        buckets = _buckets(kept)
        changes += _changes(task.name, entry["kernels"], kept, dropped, buckets)
        entry["kernels"], entry["buckets"] = kept, buckets
    if len(skipped) == len(tasks):
        floor = f" with a speedup of at least {options.min_speedup}" if options.min_speedup is not None else ""
        raise EvoError(f"the run {run.dir} has no correct kernel{floor} for {', '.join(skipped)}; nothing written")
    manifest["history"].append(dict(
        at=time.time(), run=str(run.dir), tasks=[t.name for t in tasks], top_k=options.top_k,
        min_speedup=options.min_speedup, changes=changes, skipped=skipped, exported_with=versions))
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

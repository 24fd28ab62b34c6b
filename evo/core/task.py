"""Tasks: KernelBench-style problem files, read as text, never imported here.

A problem file defines ``Model`` (the PyTorch reference), ``get_inputs()`` and
``get_init_inputs()``; KernelBench files work unchanged.  Optional extensions,
read only inside the evaluator's sandbox:

``SHAPES``            list of keyword dicts; ``get_inputs(**shape)`` for each.
                      ``get_inputs()`` alone is the default (timing) shape.
``ATOL``, ``RTOL``    tolerances (defaults depend on the output dtype).
``flops(*inputs)``, ``bytes_moved(*inputs)``  work of one call, for a roofline.

Seed kernels (candidates defining ``ModelNew``) live beside the problem file
as ``seeds/<name>.py``, or are named by ``SEED = "relative/path.py"``.

The engine's process only parses the files (``ast``): user code runs in the
evaluator's worker processes, where a reference that raises is caught and
reported (see ``evaluator.harness``).
"""
from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from evo.core.errors import TaskError

SUITE_DIR = Path(__file__).parents[1] / "suite"
REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


@dataclass(frozen=True)
class Task:
    """One operator to optimise: its reference source and its seed kernels."""

    name: str
    path: str
    source: str
    seeds: tuple[str, ...] = field(default=())

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @property
    def files_hash(self) -> str:
        """Of the problem file and its seed kernels: what a decision about the task was made on."""
        digest = hashlib.sha256(self.source.encode())
        for seed in self.seeds:
            digest.update(b"\0" + seed.encode())
        return digest.hexdigest()[:16]


def _top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
    return names


def _read_python(path: Path, what: str) -> tuple[str, ast.Module]:
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"cannot read {what} {path}: {exc}") from exc
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise TaskError(f"{what} {path} is not valid Python: line {exc.lineno}: {exc.msg}") from exc
    return source, tree


def load_task(path: str | Path) -> Task:
    """Read and check one problem file (and its seeds) without running it."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise TaskError(f"task file not found: {path}")
    source, tree = _read_python(path, "task file")
    names = _top_level_names(tree)
    missing = [n for n in REQUIRED_NAMES if n not in names]
    if missing:
        raise TaskError(
            f"task file {path} lacks {', '.join(missing)}: a problem file defines "
            "class Model(nn.Module), get_inputs() and get_init_inputs() (KernelBench format)"
        )
    seeds = []
    for seed_path in _seed_paths(path, names):
        seed_source, seed_tree = _read_python(seed_path, "seed kernel")
        if "ModelNew" not in _top_level_names(seed_tree):
            raise TaskError(f"seed kernel {seed_path} does not define class ModelNew")
        seeds.append(seed_source)
    return Task(name=path.stem, path=str(path), source=source, seeds=tuple(seeds))


def _seed_paths(path: Path, names: dict[str, ast.AST]) -> list[Path]:
    declared = names.get("SEED")
    if isinstance(declared, ast.Assign) and isinstance(declared.value, ast.Constant):
        seed = (path.parent / str(declared.value.value)).resolve()
        if not seed.is_file():
            raise TaskError(f"task file {path} names SEED {declared.value.value!r}, which does not exist")
        return [seed]
    conventional = path.parent / "seeds" / path.name
    return [conventional] if conventional.is_file() else []


def builtin_suites() -> list[str]:
    """Names accepted by ``task.suite``: every built-in task, and ``default`` for all."""
    return ["default", *sorted(p.stem for p in SUITE_DIR.glob("*.py") if p.stem != "__init__")]


def _problem_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.py") if not p.name.startswith("_"))


def load_tasks(
    suite: str | None = "default",
    path: str | None = None,
    names: list[str] | None = None,
) -> list[Task]:
    """Tasks of a built-in suite, or of a problem file or directory (``path`` wins).

    ``names`` keeps only the tasks with those names, in that order.
    """
    if path:
        root = Path(path).expanduser()
        if root.is_dir():
            files = _problem_files(root)
            if not files:
                raise TaskError(f"task directory {root.resolve()} holds no problem files (*.py)")
        elif root.is_file():
            files = [root]
        else:
            raise TaskError(f"task path not found: {root.resolve()}")
    elif suite == "default":
        files = _problem_files(SUITE_DIR)
    elif suite in builtin_suites():
        files = [SUITE_DIR / f"{suite}.py"]
    else:
        raise TaskError(f"unknown built-in suite {suite!r}; choose one of {', '.join(builtin_suites())}")
    tasks = [load_task(f) for f in files]
    if names:
        by_name = {t.name: t for t in tasks}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise TaskError(f"no task named {', '.join(unknown)}; known: {', '.join(by_name)}")
        tasks = [by_name[n] for n in names]
    duplicate = {t.name for t in tasks if sum(u.name == t.name for u in tasks) > 1}
    if duplicate:
        raise TaskError(f"two task files share the name {', '.join(sorted(duplicate))}")
    return tasks

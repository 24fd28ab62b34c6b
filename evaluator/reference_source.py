"""The part of a problem file a seed keeps: its ``Model`` class, renamed, and what the class needs.

A seed derived from ``torch.compile`` subclasses a copy of the reference class (same
parameters, buffers and initialisation) and overrides ``forward``.  The copy is renamed
``_Reference`` so that the candidate module defines no ``Model`` of its own; every use of
the name inside the copied code follows the rename (``super(Model, self).__init__()``,
``Model.SCALE``, ``isinstance(m, Model)``), so the seed stays a plain module whatever
idiom the problem file uses.  Module-level statements the class needs (constants, helper
functions and classes, imports), at any depth and wherever they stand in the file, come
along in the file's order.
"""
from __future__ import annotations

import ast
import copy

REFERENCE = "_Reference"
# Names a problem file defines for the harness, never for its Model.
_HARNESS_NAMES = {"get_inputs", "get_init_inputs", "SHAPES", "ATOL", "RTOL", "SEED", "flops", "bytes_moved"}


class NotAModel(Exception):
    """The problem file has no usable ``Model`` class (the message says why)."""


def _defined_names(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    return set()


def _used_names(node: ast.AST) -> set[str]:
    """Free names ``node`` reads, roughly: a function's own parameters and local assignments
    (``channels`` in ``def __init__(self, channels)``) are not module-level names it needs."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = node.args
        local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
        local |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        inner = [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]
        if not isinstance(node, ast.Lambda):
            inner += node.decorator_list
        body = node.body if isinstance(node.body, list) else [node.body]
        return set().union(*(_used_names(n) for n in inner)) | (
            set().union(*(_used_names(n) for n in body)) - local)
    if isinstance(node, ast.Name):
        return {node.id}
    return set().union(set(), *(_used_names(child) for child in ast.iter_child_nodes(node)))


def _renamed(node: ast.AST, lines: list[str]) -> list[str]:
    """The lines of ``node`` with every ``Model`` name (a load, never a definition) renamed."""
    first, last = node.lineno, node.end_lineno
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.decorator_list:
        first = min(d.lineno for d in node.decorator_list)
    text = [line.encode("utf-8") for line in lines[first - 1:last]]
    uses = sorted(((n.lineno, n.col_offset, n.end_col_offset) for n in ast.walk(node)
                   if isinstance(n, ast.Name) and n.id == "Model"), reverse=True)
    for line, start, end in uses:  # col offsets are UTF-8 byte offsets
        row = text[line - first]
        text[line - first] = row[:start] + REFERENCE.encode() + row[end:]
    return [row.decode("utf-8") for row in text]


def reference_class(task_source: str, skip_imports: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """Source defining ``_Reference`` (the task's ``Model`` without its ``forward``) with the
    module-level statements it needs, and the names of forward's parameters."""
    tree = ast.parse(task_source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise NotAModel("the task defines no class Model")
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None or forward.args.vararg or forward.args.kwarg:
        raise NotAModel("Model.forward must take named arguments")
    lines = task_source.splitlines()
    # The class without its forward: ModelNew overrides it, and the reference's computation
    # has no place in a candidate.
    kept_body = [stmt for stmt in model.body if stmt is not forward]
    defaults = [d for d in [*forward.args.defaults, *forward.args.kw_defaults] if d is not None]
    wanted = set().union(*(_used_names(n) for n in [*kept_body, *model.bases, *model.keywords,
                                                    *model.decorator_list, *defaults]))
    # Statements that define what the class needs, and what those need in turn.
    candidates = [s for s in tree.body if s is not model and _defined_names(s)
                  and not _defined_names(s) & _HARNESS_NAMES]
    chosen: list[ast.stmt] = []
    frontier = set(wanted)
    while frontier:
        added = [s for s in candidates if s not in chosen and _defined_names(s) & frontier
                 and not isinstance(s, (ast.Import, ast.ImportFrom))]
        frontier = set().union(*(_used_names(s) for s in added)) - set().union(*(_defined_names(s) for s in chosen))
        chosen += added
        wanted |= frontier
    imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom)) and _defined_names(s) & wanted]
    context = []
    for stmt in sorted([*imports, *chosen], key=lambda s: s.lineno):
        segment = "\n".join(_renamed(stmt, lines))
        if segment.strip() not in skip_imports:
            context.append(segment)
    class_lines = _renamed(model, lines)
    first = min([forward.lineno, *(d.lineno for d in forward.decorator_list)])
    offset = min([model.lineno, *(d.lineno for d in model.decorator_list)])
    kept = class_lines[:first - offset] + class_lines[forward.end_lineno - offset + 1:]
    if not any(line.strip() and not line.strip().startswith("#") for line in kept[1 + model.lineno - offset:]):
        kept.append("    pass")
    header = model.lineno - offset
    kept[header] = kept[header].replace("class Model", f"class {REFERENCE}", 1)
    params = [a.arg for a in [*forward.args.posonlyargs, *forward.args.args][1:] + forward.args.kwonlyargs]
    return "\n".join([*context, "", "", *kept]).strip("\n"), params


def forward_signature(task_source: str) -> str:
    """``Model.forward``'s parameters as written, defaults and keyword-only ones included, without
    annotations (they may name what a candidate does not import): ``self, x, mask=None``."""
    tree = ast.parse(task_source)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    forward = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    arguments = copy.deepcopy(forward.args)
    for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
        arg.annotation = None
    return ast.unparse(arguments)

"""Checks on a candidate's source made before any of it runs."""
from __future__ import annotations

import ast

MAX_SOURCE_BYTES = 200_000


def static_rejection(source: str) -> str | None:
    """Why this source is rejected before running it, or None if it may run.

    A syntax error is not a rejection: it is reported as a compile error when
    the module is loaded, with its traceback.
    """
    if len(source.encode("utf-8", "replace")) > MAX_SOURCE_BYTES:
        return f"source larger than {MAX_SOURCE_BYTES} bytes"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return "the candidate does not define class ModelNew"
    if not _has_triton_kernel(tree):
        return "the candidate defines no @triton.jit kernel: a candidate must launch its own Triton kernel"
    return None


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _has_triton_kernel(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if _decorator_name(dec).split(".")[-1] in ("jit", "autotune", "heuristics"):
                    return True
    return False

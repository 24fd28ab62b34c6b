"""Facts read from a kernel's source without running it.

Tunable constants are integer literals a kernel engineer would sweep: the
module-level ``BLOCK_SIZE = 256`` / ``NUM_WARPS = 4`` / ``NUM_STAGES = 2``
assignments of our seed kernels, and literal ``num_warps=``/``num_stages=``/
``BLOCK_*=`` keyword arguments at kernel launches; grid shape constants
(``ROWS_PER_PROGRAM = 4``, ``NUM_PROGRAMS``, ``PROGRAMS_PER_SM``, ``GRID_*``, a GEMM's ``SPLIT_K``, a
reduction's ``SPLIT_R0``); switches between two
code paths (``K0_USE_TAPS_LOOP = 1``: 1 or 0).  The offline mutation
operator rewrites them and the archive's descriptors bucket them.
"""
from __future__ import annotations

import ast
import hashlib
import re
import threading
from dataclasses import dataclass

_KINDS = (
    ("switch", re.compile(r"^([A-Z0-9]+_)*USE_[A-Z0-9_]+$")),  # 1 or 0: one of two code paths
    ("warps", re.compile(r"^(NUM_WARPS|num_warps|[A-Z0-9_]*_WARPS)$")),
    ("stages", re.compile(r"^(NUM_STAGES|num_stages|[A-Z0-9_]*_STAGES)$")),
    ("group", re.compile(r"^([A-Z0-9_]*GROUP_SIZE[A-Z0-9_]*|([A-Z0-9]+_)*GROUP_[MN])$")),
    ("grid", re.compile(r"^([A-Z0-9_]+_PER_PROGRAM|NUM_PROGRAMS|([A-Z0-9]+_)*PROGRAMS_PER_SM|GRID_[A-Z0-9_]+|([A-Z0-9]+_)*SPLIT_(K|R0))$")),
    ("block", re.compile(r"^(BLOCK[A-Z0-9_]*|[A-Z0-9_]*_BLOCK[A-Z0-9_]*|TILE[A-Z0-9_]*)$")),
)

# Allowed values per kind: powers of two except for pipeline stages.
RANGES = {"switch": (0, 1), "block": (16, 8192), "warps": (1, 32), "stages": (1, 6), "group": (1, 16), "grid": (1, 1024)}


@dataclass(frozen=True)
class Tunable:
    """One integer literal in the source that may be changed."""

    name: str
    kind: str
    value: int
    start: int  # byte offsets of the literal in the UTF-8 source
    end: int


def _kind_of(name: str) -> str | None:
    for kind, pattern in _KINDS:
        if pattern.match(name):
            return kind
    return None


def _line_offsets(data: bytes) -> list[int]:
    offsets, pos = [0], 0
    for line in data.splitlines(keepends=True):
        pos += len(line)
        offsets.append(pos)
    return offsets


_PARSE_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """``ast.parse``, one thread of the process at a time: CPython 3.11 builds the Python AST with an
    interpreter-wide recursion counter, and two threads parsing at once can fail with
    ``SystemError: AST constructor recursion depth mismatch`` (seen here with island threads and a
    0.5 ms switch interval; elsewhere: pytest-dev/pytest#10763, python/cpython#106905)."""
    with _PARSE_LOCK:
        return ast.parse(source)


def find_tunables(source: str, tree: ast.Module | None = None) -> list[Tunable]:
    """Tunable integer literals, in source order; [] if the source does not parse."""
    if tree is None:
        try:
            tree = parse(source)
        except SyntaxError:
            return []
    lines = _line_offsets(source.encode("utf-8"))
    found: list[Tunable] = []

    def add(name: str, value: ast.expr) -> None:
        kind = _kind_of(name)
        if (kind and isinstance(value, ast.Constant) and type(value.value) is int
                and (value.value in (0, 1) if kind == "switch" else value.value > 0)):
            start = lines[value.lineno - 1] + value.col_offset
            end = lines[value.end_lineno - 1] + value.end_col_offset
            found.append(Tunable(name, kind, value.value, start, end))

    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            add(node.targets[0].id, node.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg:
                    add(keyword.arg, keyword.value)
    return sorted(found, key=lambda t: t.start)


def with_values(source: str, changes: dict[Tunable, int]) -> str:
    """The source with each tunable's literal replaced by its new value."""
    data = source.encode("utf-8")
    for tunable in sorted(changes, key=lambda t: t.start, reverse=True):
        data = data[: tunable.start] + str(int(changes[tunable])).encode() + data[tunable.end:]
    return data.decode("utf-8")


def normalized_hash(source: str, tree: ast.Module | None = None) -> str:
    """Hash that ignores comments, blank lines and formatting (via the AST).

    ``tree``: the source's AST, when the caller has parsed it already.
    """
    if tree is None:
        try:
            tree = parse(source)
        except SyntaxError:
            pass
    if tree is None:
        text = "\n".join(line.rstrip() for line in source.strip().splitlines())
    else:
        text = ast.dump(tree)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def call_spans(source: str, opening: re.Pattern) -> list[tuple[int, int]]:
    r"""``(start, end)`` of each call whose text up to its opening bracket ``opening`` matches
    (a pattern such as ``\btl\.load\(``), brackets matched; a call left open is left out."""
    spans = []
    for call in opening.finditer(source):
        depth, end = 1, call.end()
        while end < len(source) and depth:
            depth += {"(": 1, ")": -1}.get(source[end], 0)
            end += 1
        if depth == 0:
            spans.append((call.start(), end))
    return spans

"""Structural facts about a Triton kernel module, read from its AST.

One parse gives everything the descriptors need: how the kernels load memory,
how they compute, how the work is split over programs.  Heuristic by nature:
the facts describe what the source says, not what the compiler made of it.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from evo.core.kernel_source import Tunable, find_tunables, parse

_BLOCK_POINTERS = {"make_block_ptr", "make_tensor_descriptor", "_experimental_make_tensor_descriptor",
                   "advance"}
_HINTS = {"multiple_of", "max_contiguous", "max_constancy"}


@dataclass(frozen=True)
class KernelFacts:
    parses: bool
    tunables: tuple[Tunable, ...] = ()
    kernels: int = 0             # @triton.jit functions
    max_loops: int = 0           # most top-level loops in one kernel body (passes over the data)
    uses_dot: bool = False       # tl.dot: tensor cores
    block_pointers: bool = False  # tl.make_block_ptr / tensor descriptors (TMA)
    hints: bool = False          # tl.multiple_of / max_contiguous: vectorised access
    tiles_2d: bool = False       # 2-D tiles built by broadcasting ([:, None])
    program_axes: int = 0        # 1 + the highest tl.program_id axis used
    persistent: bool = False     # tl.num_programs: a grid-stride (persistent) loop
    atomics: bool = False        # tl.atomic_*

    @property
    def max_stages(self) -> int:
        return max((t.value for t in self.tunables if t.kind == "stages"), default=1)


def _attr_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def is_kernel(fn: ast.FunctionDef) -> bool:
    """Whether ``fn`` is a Triton kernel: decorated ``jit`` (``triton.jit``, with or without
    arguments), ``autotune`` or ``heuristics``."""
    return any(_attr_name(d.func if isinstance(d, ast.Call) else d) in ("jit", "autotune", "heuristics")
               for d in fn.decorator_list)


def top_level_kernels(tree: ast.Module) -> list[ast.FunctionDef]:
    """The module's Triton kernels defined at its top level, in source order."""
    return [fn for fn in tree.body if isinstance(fn, ast.FunctionDef) and is_kernel(fn)]


def grid_launches(tree: ast.Module, kernel: ast.FunctionDef):
    """Each statement ``kernel[grid](...)`` of the module's plain functions (its launchers), as
    ``(launcher, statement, call)``: where the operators that rewrite a kernel's grid find it."""
    for launcher in tree.body:
        if not isinstance(launcher, ast.FunctionDef) or is_kernel(launcher):
            continue
        for stmt in launcher.body:
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript)
                    and ast.unparse(call.func) == f"{kernel.name}[grid]" and call.args):
                yield launcher, stmt, call


def kernel_facts(source: str, tree: ast.Module | None = None) -> KernelFacts:
    """The facts of ``source``; ``tree``: its AST, when the caller has parsed it already."""
    if tree is None:
        try:
            tree = parse(source)
        except SyntaxError:
            return KernelFacts(parses=False)
    kernels = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and is_kernel(n)]
    facts = dict(kernels=len(kernels), max_loops=0, uses_dot=False, block_pointers=False, hints=False,
                 tiles_2d=False, program_axes=0, persistent=False, atomics=False)
    for kernel in kernels:
        loops = sum(isinstance(s, (ast.For, ast.While)) for s in kernel.body)
        facts["max_loops"] = max(facts["max_loops"], loops)
        for node in ast.walk(kernel):
            if isinstance(node, ast.Call):
                name = _attr_name(node.func)
                facts["uses_dot"] |= name == "dot"
                facts["block_pointers"] |= name in _BLOCK_POINTERS
                facts["hints"] |= name in _HINTS
                facts["persistent"] |= name == "num_programs"
                facts["atomics"] |= name.startswith("atomic_")
                if name == "program_id":
                    axis = node.args[0] if node.args else next((k.value for k in node.keywords), None)
                    if isinstance(axis, ast.Constant) and isinstance(axis.value, int):
                        facts["program_axes"] = max(facts["program_axes"], axis.value + 1)
            elif isinstance(node, ast.Subscript):
                index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                facts["tiles_2d"] |= any(isinstance(i, ast.Constant) and i.value is None for i in index)
    return KernelFacts(parses=True, tunables=tuple(find_tunables(source, tree)), **facts)

"""Offline rewrite of a looped reduction into a persistent one: the whole row in one block.

Needs no LLM.  Inductor's looped reductions (``triton_red_*``) walk each row R0_BLOCK elements at a
time, carrying accumulators of a whole block across the iterations with a where-select per element,
and reduce them (``tl.sum(_tmp, 1)``, a welford, an online softmax) after the loop.  Where the row
fits one block, its ``triton_per_*`` kernels instead load the row once and reduce it in registers.
The child of a looped kernel whose row ``r0_numel`` (a literal) is at most ``max_block`` pins
``R0_BLOCK`` to the next power of two at or above it, inside the kernel, and replaces each loop

    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        ...  # the body

by ``r0_offset = 0`` and the body, dedented, unchanged.  The launch's ``R0_BLOCK=`` keyword goes,
and so does the module's constant that fed it (``K0_BLOCK_R0``) where nothing else reads it: the
search then spends no children moving a block nothing reads, nor shrinking the pinned one (a
constant inside a kernel is no tunable).  Which is faster depends on the row and the GPU (a long
row in one block costs registers, occupancy and the loop's overlap of loads); this operator
proposes it and the evaluator times it.  Not yet timed on a GPU.

Correct by construction: with R0_BLOCK at least r0_numel, the parent's loop runs exactly once, at
``r0_offset = 0``, so the child is the parent at that block with its one iteration written out.
The parent is correct at that block where its masks are computed (``r0_mask = r0_index <
r0_numel``); inductor writes an all-true mask only where its block divided the row, so such a mask
is kept only where r0_numel is a power of two (the child's block then equals the row).  Anything
else is refused: another loop over r0, r0_numel or ``rnumel`` read beyond the loops' headers and
masks, ``r0_offset`` read outside its loops, a launch other than ``kernel[grid](...)`` or passing
R0_BLOCK positionally, decorators beyond ``@triton.jit``.
"""
from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass

from evo.core.kernel_facts import grid_launches
from evo.core.kernel_source import parse
from operators.base import KernelRewrite, Proposal

_LOOPS = ("tl.range(0, r0_numel, R0_BLOCK)", "range(0, r0_numel, R0_BLOCK)")
_COMPUTED_MASK = "r0_index < r0_numel"
_NONE = "no looped reduction (`for r0_offset in tl.range(0, r0_numel, R0_BLOCK)`, a literal r0_numel)"
_R0 = {"R0_BLOCK", "RBLOCK", "r0_numel", "rnumel", "r0_offset", "roffset"}  # a loop over these is over r0


@dataclass
class _Reduction:
    kernel: ast.FunctionDef
    loops: list[ast.For]  # the top-level loops over r0, each made one pass
    r0_numel: int
    block: int  # the child's R0_BLOCK: the next power of two at or above r0_numel
    calls: list[ast.Call]  # the launches, each passing R0_BLOCK=...
    constants: set[str]  # names the launches pass as R0_BLOCK (K0_BLOCK_R0): removed where nothing reads them


def _named(nodes, name: str) -> list[ast.Name]:
    return [n for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name]


def _reduction(tree: ast.Module, fn: ast.FunctionDef, max_block: int) -> _Reduction | str | None:
    """``fn`` as a looped reduction this operator can make persistent; a reason where it is one it
    must refuse; None where it is not one at all (a persistent kernel has no R0_BLOCK parameter)."""
    args = fn.args
    params = [a.arg for a in args.args]
    if "R0_BLOCK" not in params:
        return None
    numel = [s.value.value for s in fn.body if isinstance(s, ast.Assign) and ast.unparse(s.targets) == "r0_numel"
             and isinstance(s.value, ast.Constant) and type(s.value.value) is int]
    loops = [s for s in fn.body if isinstance(s, ast.For) and ast.unparse(s.target) == "r0_offset"
             and ast.unparse(s.iter) in _LOOPS]
    if len(numel) != 1 or numel[0] < 1 or not loops:
        return None  # not inductor's looped reduction over a literal row
    n, name = numel[0], fn.name
    if n > max_block:
        return f"{name}: r0_numel {n} is more than one block of at most {max_block}"
    block = 1 << (n - 1).bit_length()
    if any(ast.unparse(d) not in ("triton.jit", "jit") for d in fn.decorator_list):
        return f"{name}: decorated beyond @triton.jit"
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults:
        return f"{name}: parameters other than plain positional ones"
    others = [s for s in ast.walk(fn) if isinstance(s, (ast.For, ast.While)) and s not in loops
              and {v.id for v in ast.walk(s.test if isinstance(s, ast.While) else s.iter)
                   if isinstance(v, ast.Name)} & _R0]
    if others or any(loop.orelse for loop in loops):
        return f"{name}: a loop over r0 other than a top-level `for r0_offset in tl.range(0, r0_numel, R0_BLOCK)`"
    if any(loop.body[0].lineno <= loop.iter.end_lineno for loop in loops):
        return f"{name}: a loop's body on its header's line"
    masks = [[s for s in ast.walk(loop) if isinstance(s, ast.Assign) and ast.unparse(s.targets) == "r0_mask"]
             for loop in loops]
    if block != n and not all(each and all(ast.unparse(m.value) == _COMPUTED_MASK for m in each) for each in masks):
        return (f"{name}: r0_numel {n} is not a power of two and a loop's r0_mask is not computed "
                f"(`r0_mask = {_COMPUTED_MASK}`): an all-true mask holds only where the block divides the row")
    # r0_numel and rnumel read only by the loops' headers, the masks and `rnumel = r0_numel`
    alias = [s for s in fn.body if isinstance(s, ast.Assign) and ast.unparse(s) == "rnumel = r0_numel"]
    readers = [loop.iter for loop in loops] + [m.value for each in masks for m in each] + alias
    allowed = {id(v) for v in _named(readers, "r0_numel")}
    reads = [v for v in _named(fn.body, "r0_numel") + _named(fn.body, "rnumel")
             if isinstance(v.ctx, ast.Load) and id(v) not in allowed]
    stores = [v for numel_name in ("r0_numel", "rnumel", "R0_BLOCK") for v in _named(fn.body, numel_name)
              if not isinstance(v.ctx, ast.Load)]
    if reads or len(stores) != 1 + len(alias):
        return f"{name}: r0_numel, rnumel or R0_BLOCK read or set beyond the loops' headers and masks"
    inside = {id(v) for v in _named(loops, "r0_offset")}
    if any(id(v) not in inside for v in _named(fn.body, "r0_offset")):
        return f"{name}: r0_offset read outside its loops"
    launches = list(grid_launches(tree, fn))
    if not launches or len(_named(tree.body, name)) != len(launches):
        return f"{name}: launched other than by `{name}[grid](...)`"
    calls, constants = [call for _, _, call in launches], set()
    for call in calls:
        keyword = next((k for k in call.keywords if k.arg == "R0_BLOCK"), None)
        if (keyword is None or len(call.args) > params.index("R0_BLOCK") or any(k.arg is None for k in call.keywords)
                or any(isinstance(a, ast.Starred) for a in call.args)):
            return f"{name}: a launch that does not pass R0_BLOCK=... as a keyword"
        if isinstance(keyword.value, ast.Name):
            constants.add(keyword.value.id)
    return _Reduction(fn, loops, n, block, calls, constants)


class PersistentReduction(KernelRewrite):
    """Make a looped reduction persistent: the whole row in one block (see the module's text)."""

    name = "persistent_reduction"
    nothing = _NONE

    def __init__(self, *, max_block: int = 4096):
        """``max_block``: the longest row (r0_numel) made one block."""
        if max_block < 1:
            raise ValueError(f"max_block must be at least 1, not {max_block}")
        self.max_block = max_block

    def analyse(self, tree: ast.Module, fn: ast.FunctionDef) -> _Reduction | str | None:
        return _reduction(tree, fn, self.max_block)

    def rewrite(self, source: str, reduction: _Reduction) -> Proposal:
        child = persistent_source(source, reduction)
        if child is None:
            return Proposal(self.name, None, f"{reduction.kernel.name}: the rewrite did not parse")
        return Proposal(self.name, child, f"{reduction.kernel.name}: r0_numel {reduction.r0_numel} in one block, "
                                          f"R0_BLOCK pinned to {reduction.block}")


def _dedented(line: bytes, by: int) -> bytes:
    return line[min(by, len(line) - len(line.lstrip(b" "))):]


def _owns_its_lines(stmt: ast.stmt, lines: list[str]) -> bool:
    """Whether ``stmt`` (at module level) shares its lines with nothing but a comment."""
    rest = lines[stmt.end_lineno - 1][stmt.end_col_offset:].strip()
    return stmt.col_offset == 0 and (not rest or rest.startswith("#"))


def persistent_source(source: str, r: _Reduction) -> str | None:
    """``source`` with reduction ``r`` made persistent (see the module's text); None where the
    rewrite does not parse."""
    data = source.encode("utf-8")  # the AST's columns count UTF-8 bytes
    lines = data.splitlines(keepends=True)
    starts = [0, *itertools.accumulate(len(line) for line in lines)]

    def start(node) -> int:
        return starts[node.lineno - 1] + node.col_offset

    def end(node) -> int:
        return starts[node.end_lineno - 1] + node.end_col_offset

    fn, edits = r.kernel, []
    # the block pinned as the body's first statement (after a docstring)
    first = fn.body[1] if ast.get_docstring(fn) is not None else fn.body[0]
    line = starts[first.lineno - 1]
    edits.append((line, line, b" " * first.col_offset + f"R0_BLOCK: tl.constexpr = {r.block}\n".encode()))
    # the parameter, with the separator before it (after it, where it is the first)
    args = fn.args.args
    i = [a.arg for a in args].index("R0_BLOCK")
    if i:
        edits.append((end(args[i - 1]), end(args[i]), b""))
    else:
        edits.append((start(args[0]), start(args[1]) if len(args) > 1 else end(args[0]), b""))
    # each loop: its header becomes r0_offset = 0, its body moves out one level
    for loop in r.loops:
        by = loop.body[0].col_offset - loop.col_offset
        body = b"".join(_dedented(line, by) for line in lines[loop.iter.end_lineno:loop.end_lineno])
        edits.append((starts[loop.lineno - 1], starts[loop.end_lineno],
                      b" " * loop.col_offset + b"r0_offset = 0\n" + body))
    # each launch's R0_BLOCK=..., with the separator before it
    for call in r.calls:
        keyword = next(k for k in call.keywords if k.arg == "R0_BLOCK")
        before = max((e for e in call.args + call.keywords if end(e) <= start(keyword)), key=end)
        edits.append((end(before), end(keyword), b""))
    for begin, stop, new in sorted(edits, key=lambda e: e[:2], reverse=True):  # bottom up
        data = data[:begin] + new + data[stop:]
    text = data.decode("utf-8")
    try:
        tree = parse(text)
    except SyntaxError:
        return None
    # the constants that fed R0_BLOCK (K0_BLOCK_R0 = 2048), where nothing reads them now
    lines = text.splitlines(keepends=True)
    drop = []
    for name in r.constants:
        sets = [s for s in tree.body if isinstance(s, ast.Assign) and ast.unparse(s.targets) == name]
        if len(sets) == 1 and len(_named(tree.body, name)) == 1 and _owns_its_lines(sets[0], lines):
            drop.append(sets[0])
    for stmt in sorted(drop, key=lambda s: s.lineno, reverse=True):
        del lines[stmt.lineno - 1:stmt.end_lineno]
    return "".join(lines)

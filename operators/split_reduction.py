"""Offline split of a looped reduction's long rows across programs: two passes, no atomics.

Needs no LLM.  Inductor's looped reduction (``triton_red_*``) gives each program ``XBLOCK`` rows and
walks each row ``R0_BLOCK`` elements at a time.  Where the rows are few and long, most of the GPU
idles (8 rows of a million elements: 8 programs for 132 SMs).  Inductor splits a reduction itself
where it stands alone over few rows (KernelBench's FrobeniusNorm: one row of 1.9M elements became
14336 partial rows); a reduction it fused with other work, or a kernel a search changed, keeps
its rows whole.  The child launches the kernel twice, from its own text:

- ``<kernel>_split_r0`` on a grid of (row blocks, SPLIT): program (r, s) runs the kernel's loop over
  the s-th run of ``R0_CHUNK`` elements of its rows (the loop body and its masks unchanged: a run
  is whole blocks of R0_BLOCK, and the mask against ``r0_numel`` still ends the last), reduces its
  accumulators as the kernel does after the loop, and stores each partial, fp32, into a workspace
  ``(accumulators, rows, SPLIT)``;
- ``<kernel>`` itself, on its own grid, its loop replaced by the reduction of each row's SPLIT
  partials with the same reduction, in a fixed order, then the kernel's own code after the loop
  (the store, a mean's division, ...) as it was.

Correct by construction: each accumulator starts at its reduction's identity and is combined
with the same operation the reduction after the loop applies (``+`` with ``tl.sum``,
``maximum`` with ``max2``, ``minimum`` with ``min2``), so a row's result is the reduction of its
runs' partials.  Anything else is refused: a second loop over the row (softmax's, logsumexp's), a
welford or an argmax, an accumulator read beyond its update, code after the loop that reads what
only the loop computed, ``r0_numel`` or ``xnumel`` not a literal, a mask other than
``r0_index < r0_numel``.  ``K<n>_SPLIT_R0`` is a tunable constant (the constants operator and the
sweep move it); the launcher keeps each run at least one block.  It applies where the rows number
at most ``max_rows`` and each is at least ``min_row`` elements.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from evo.core.kernel_facts import grid_launches
from evo.core.kernel_source import parse
from operators.base import KernelRewrite, Proposal

_LOOPS = ("tl.range(0, r0_numel, R0_BLOCK)", "range(0, r0_numel, R0_BLOCK)")
_PROGRAMS = 264  # a first split that fills about two waves of an H100's 132 SMs
# reduction after the loop -> (the update inside it, the accumulator's initial value, its identity)
_REDUCTIONS = {"tl.sum": ("+", ("0", "0.0"), "0.0"),
               "triton_helpers.max2": ("triton_helpers.maximum", ("float('-inf')",), "float('-inf')"),
               "triton_helpers.min2": ("triton_helpers.minimum", ("float('inf')",), "float('inf')")}
# the row's indices and block: pass two keeps none of them
_ROW_NAMES = {"r0_offset", "r0_index", "r0_mask", "R0_BLOCK", "RBLOCK", "r0_base", "rbase", "roffset", "rindex"}
_NONE = "no looped reduction over few long rows (`for r0_offset in tl.range(0, r0_numel, R0_BLOCK)`, literal sizes)"


@dataclass
class _Accumulator:
    name: str  # _tmp2
    result: str  # tmp2 = tl.sum(_tmp2, 1)[:, None]: tmp2
    reduction: str  # tl.sum
    statement: ast.Assign  # the reduction after the loop


@dataclass
class _Reduction:
    kernel: ast.FunctionDef
    loop: ast.For
    rows: int
    row: int
    accumulators: list[_Accumulator]
    launch: ast.stmt
    call: ast.Call
    prefix: str  # K0_


def _names(node, context=None) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and (context is None or isinstance(n.ctx, context))}


def _literal(fn: ast.FunctionDef, name: str) -> int | None:
    found = [s.value.value for s in fn.body if isinstance(s, ast.Assign) and ast.unparse(s.targets) == name
             and isinstance(s.value, ast.Constant) and type(s.value.value) is int]
    return found[0] if len(found) == 1 else None


def _update_matches(loop: ast.For, acc: str, reduction: str) -> bool:
    """Whether the loop updates ``acc`` only as ``acc = tl.where(mask, <combined>, acc)``, the combined
    value ``acc + v`` (or ``maximum(acc, v)``, ...) as the reduction after the loop needs."""
    op = _REDUCTIONS[reduction][0]
    sets = [s for s in ast.walk(loop) if isinstance(s, ast.Assign) and acc in _names(s, ast.Store)]
    reads = [s for s in ast.walk(loop) if isinstance(s, ast.Assign) and acc in _names(s.value)]
    if len(sets) != 1 or len(reads) != 2:
        return False
    where = sets[0]
    if not (isinstance(where.value, ast.Call) and ast.unparse(where.value.func) == "tl.where"
            and len(where.value.args) == 3 and ast.unparse(where.value.args[2]) == acc):
        return False
    combined = ast.unparse(where.value.args[1])
    combine = next((s for s in reads if s is not where and ast.unparse(s.targets) == combined), None)
    if combine is None:
        return False
    value = combine.value
    if op == "+":
        return isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and acc in (
            ast.unparse(value.left), ast.unparse(value.right)) and ast.unparse(value.left) != ast.unparse(value.right)
    return (isinstance(value, ast.Call) and ast.unparse(value.func) == op and len(value.args) == 2
            and [ast.unparse(a) for a in value.args].count(acc) == 1)


def _reduction(tree: ast.Module, fn: ast.FunctionDef, max_rows: int, min_row: int) -> _Reduction | str | None:
    """``fn`` as a reduction this operator can split; a reason where it must refuse one; None where
    it is no looped reduction over few long rows."""
    params = [a.arg for a in fn.args.args]
    rows, row = _literal(fn, "xnumel"), _literal(fn, "r0_numel")
    loops = [s for s in fn.body if isinstance(s, ast.For) and ast.unparse(s.target) == "r0_offset"]
    if "R0_BLOCK" not in params or rows is None or row is None or not loops or rows > max_rows or row < min_row:
        return None
    name = fn.name
    if len(loops) != 1 or ast.unparse(loops[0].iter) not in _LOOPS or loops[0].orelse:
        return f"{name}: more than one loop over the row, or another kind"
    loop = loops[0]
    if "ws_ptr" in params or "program_id(1)" in ast.unparse(fn) or "num_programs(1)" in ast.unparse(fn):
        return f"{name}: already split, or its grid has a second axis"
    masks = [s for s in ast.walk(loop) if isinstance(s, ast.Assign) and ast.unparse(s.targets) == "r0_mask"]
    if len(masks) != 1 or ast.unparse(masks[0].value) != "r0_index < r0_numel":
        return f"{name}: its row mask is not `r0_index < r0_numel`"
    after = fn.body[fn.body.index(loop) + 1:]
    before = fn.body[:fn.body.index(loop)]
    accumulators = []
    for stmt in before:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and ast.unparse(stmt.targets[0]).startswith("_tmp")):
            continue
        acc = ast.unparse(stmt.targets[0])
        reduced = [s for s in after if isinstance(s, ast.Assign) and acc in _names(s.value)]
        init = stmt.value
        if (len(reduced) != 1 or not isinstance(reduced[0].value, ast.Subscript)
                or not isinstance(reduced[0].value.value, ast.Call)):
            return f"{name}: {acc} is read after the loop other than by one reduction"
        call = reduced[0].value.value
        reduction = ast.unparse(call.func)
        if (reduction not in _REDUCTIONS or [ast.unparse(a) for a in call.args] != [acc, "1"]
                or ast.unparse(reduced[0].value.slice) != "(:, None)"):
            return f"{name}: {acc} is reduced by {ast.unparse(reduced[0].value)[:60]}, not a sum, max2 or min2"
        if not (isinstance(init, ast.Call) and ast.unparse(init.func) == "tl.full" and len(init.args) == 3
                and ast.unparse(init.args[1]) in _REDUCTIONS[reduction][1]):
            return f"{name}: {acc} does not start at its reduction's identity"
        if not _update_matches(loop, acc, reduction):
            return f"{name}: {acc} is updated other than as `where(mask, {acc} <op> value, {acc})`"
        accumulators.append(_Accumulator(acc, ast.unparse(reduced[0].targets[0]), reduction, reduced[0]))
    if not accumulators:
        return f"{name}: no accumulator (`_tmpN = tl.full([XBLOCK, R0_BLOCK], ...)`) before its loop"
    # after the loop: no name only the loop set, other than the accumulators
    loop_only = _names(loop, ast.Store) - _names(ast.Module(before, []), ast.Store)
    if any(_names(s) & (loop_only - {a.name for a in accumulators}) for s in after):
        return f"{name}: code after the loop reads what only the loop computed"
    if any(_names(s) & _ROW_NAMES for s in after):
        return f"{name}: code after the loop reads the row's indices"
    for launcher, stmt, call in grid_launches(tree, fn):
        keywords = {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg}
        prefix = re.fullmatch(r"(K\d+_)\w+", keywords.get("R0_BLOCK", ""))
        if prefix and len(call.args) == len(params) - 2 and not any(isinstance(a, ast.Starred) for a in call.args):
            return _Reduction(fn, loop, rows, row, accumulators, stmt, call, prefix.group(1))
    return f"{name}: no launch `{name}[grid](...)` with R0_BLOCK=K<n>_... as a keyword"


def split_source(source: str, r: _Reduction, split: int) -> str:
    """``source`` with reduction ``r`` launched as two passes (see the module's text)."""
    lines = source.splitlines(keepends=True)
    fn, loop = r.kernel, r.loop
    pad = " " * loop.col_offset
    count = len(r.accumulators)
    decorators = lines[fn.decorator_list[0].lineno - 1:fn.lineno - 1]
    signature = "".join(lines[fn.lineno - 1:fn.body[0].lineno - 1])
    cut = signature.rindex("):")
    before = lines[fn.body[0].lineno - 1:loop.lineno - 1]
    header = lines[loop.lineno - 1]
    body = lines[loop.lineno:loop.end_lineno]
    reductions = {a.statement.lineno: a for a in r.accumulators}
    after = lines[loop.end_lineno:fn.end_lineno]
    first_after = loop.end_lineno + 1  # 1-based line of after[0]
    # pass 1: the loop over this program's run, then each partial into the workspace
    run = header.replace("(0, r0_numel, R0_BLOCK)", "(_r0_start, _r0_start + R0_CHUNK, R0_BLOCK)")
    partial = (decorators + [signature[:cut].replace(f"def {fn.name}(", f"def {fn.name}_split_r0(", 1)
                             + ", ws_ptr, R0_CHUNK: tl.constexpr" + signature[cut:]] + before
               + [f"{pad}# this program's run of the row: R0_CHUNK elements (whole blocks), the s-th\n",
                  f"{pad}_r0_start = tl.program_id(1) * R0_CHUNK\n", run] + body
               + [f"{pad}{a.result} = {ast.unparse(a.statement.value)}\n" for a in r.accumulators]
               + [f"{pad}tl.store(ws_ptr + (({i} * {r.rows} + xindex) * tl.num_programs(1) + tl.program_id(1)), "
                  f"{a.result}, xmask)\n" for i, a in enumerate(r.accumulators)] + ["\n\n"])
    # pass 2: the kernel, its loop replaced by the reduction of each row's partials, in order
    kept = [line for line in before if not re.search(r"\b(R0_BLOCK|r0_base|rbase)\b", line)]
    combine = [f"{pad}# each row's SPLIT_R0 partials (pass one's), reduced as the loop's accumulators were\n",
               f"{pad}_split = tl.arange(0, SPLIT_BLOCK)[None, :]\n"]
    for i, a in enumerate(r.accumulators):
        identity = _REDUCTIONS[a.reduction][2]
        combine.append(f"{pad}{a.name} = tl.load(ws_ptr + (({i} * {r.rows} + xindex) * SPLIT_R0 + _split), "
                       f"xmask & (_split < SPLIT_R0), other={identity})\n")
    rest = [line for k, line in enumerate(after) if first_after + k not in reductions]
    reduced = [f"{pad}{a.result} = {ast.unparse(a.statement.value)}\n" for a in r.accumulators]
    total = (decorators + [signature[:cut] + ", ws_ptr, SPLIT_R0: tl.constexpr, SPLIT_BLOCK: tl.constexpr"
                           + signature[cut:]] + kept + combine + reduced + rest)
    launch_pad = " " * r.launch.col_offset
    call = ast.get_source_segment(source, r.call)
    arguments = call[call.index("[grid](") + len("[grid]("):-1]
    block = {k.arg: ast.unparse(k.value) for k in r.call.keywords}["R0_BLOCK"]
    device = ast.unparse(r.call.args[0])
    launch = [f"{launch_pad}# the rows split: runs of whole blocks a program, partials into a workspace, then\n",
              f"{launch_pad}# each row's partials reduced and the kernel's code after its loop\n",
              f"{launch_pad}_runs = max(1, {r.prefix}SPLIT_R0)\n",
              f"{launch_pad}_chunk = triton.cdiv(triton.cdiv({r.row}, _runs), {block}) * {block}\n",
              f"{launch_pad}_split = triton.cdiv({r.row}, _chunk)\n",
              f"{launch_pad}_ws = torch.empty(({count}, {r.rows}, _split), dtype=torch.float32,\n",
              f"{launch_pad}                  device={device}.device)\n",
              f"{launch_pad}{fn.name}_split_r0[(grid[0], _split, 1)]({arguments}, ws_ptr=_ws, R0_CHUNK=_chunk)\n",
              f"{launch_pad}{fn.name}[grid]({arguments}, ws_ptr=_ws, SPLIT_R0=_split, "
              f"SPLIT_BLOCK=triton.next_power_of_2(_split))\n"]
    edits = sorted([(r.launch.lineno - 1, r.launch.end_lineno, launch),
                    (fn.decorator_list[0].lineno - 1, fn.end_lineno, partial + total)], reverse=True)
    for start, end, new in edits:
        lines[start:end] = new
    text = "".join(lines)
    last = list(re.finditer(rf"^{r.prefix}\w+ = \d+\n", text, re.M))
    at = last[-1].end() if last else 0
    return text[:at] + f"{r.prefix}SPLIT_R0 = {split}\n" + text[at:]


class SplitReduction(KernelRewrite):
    """Split a looped reduction's few long rows across programs, in two passes (see the module's text)."""

    name = "split_reduction"
    nothing = _NONE

    def __init__(self, *, max_rows: int = 128, min_row: int = 4096):
        """``max_rows``: split only reductions over at most this many rows; ``min_row``: each at least this long."""
        if max_rows < 1 or min_row < 2:
            raise ValueError("max_rows must be at least 1 and min_row at least 2")
        self.max_rows, self.min_row = max_rows, min_row

    def analyse(self, tree: ast.Module, fn: ast.FunctionDef) -> _Reduction | str | None:
        return _reduction(tree, fn, self.max_rows, self.min_row)

    def rewrite(self, source: str, r: _Reduction) -> Proposal:
        split = 2
        while split * r.rows * 2 <= _PROGRAMS and split * 2 <= 256:
            split *= 2
        child = split_source(source, r, split)
        try:
            parse(child)
        except SyntaxError:
            return Proposal(self.name, None, f"{r.kernel.name}: the split source did not parse")
        return Proposal(self.name, child, f"{r.kernel.name}: {r.rows} rows of {r.row} in {split} runs each")

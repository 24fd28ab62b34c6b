"""Offline rewrite of a GEMM template into a persistent kernel: a few programs loop over the tiles.

Needs no LLM.  Inductor's Triton GEMM template launches one program per BLOCK_M x BLOCK_N output
tile.  The child launches at most ``K<n>_PROGRAMS_PER_SM`` programs per SM (never more than there
are tiles), and each walks the tiles ``tl.num_programs(0)`` apart:

    for _tile in range(tl.program_id(0), _num_tiles, tl.num_programs(0)):
        pid = tl.cast(_tile, INDEX_DTYPE)
        ...  # the template's own swizzle, loop over K, epilogue and store

Why: a persistent kernel pays its launch and its prologue (constants, strides, the early exit)
once per program rather than once per tile, and where the tiles are not a multiple of the SMs the
programs of the last, partial wave of a one-program-per-tile grid leave SMs idle while a
persistent program simply takes the next tile.  Whether that pays for inductor's templates has not
yet been timed on a GPU: this operator proposes it and the evaluator decides.

Correct by construction: the statements from ``pid = tl.program_id(0)...`` to the end of the
kernel are moved into the loop unchanged, so every tile in ``[0, tiles)`` is computed by exactly one
program with the template's own swizzle and masks, whatever the tile size and programs per SM.  It
applies to a kernel with literal M and N (inductor compiled for fixed shapes), one program axis,
the template's loop over K, and no ``return`` after ``pid`` (in a loop it would skip the program's
remaining tiles).  The launcher reads the SM count once per device; off CUDA (Triton's CPU
interpreter) it takes 4, so that a program walks several tiles there too.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from evo.core.kernel_facts import grid_launches
from operators.base import KernelRewrite, Proposal

_LOOP = "range(0, tl.cdiv(K, BLOCK_K))"
_PID = re.compile(r"tl\.program_id\(0\)(?:\.to\((.+)\))?")
_HELPER = "_persistent_sm_count"
_CPU_SMS = 4  # "SMs" off CUDA: the CPU interpreter then runs several tiles per program
_SM_HELPER = f'''_PERSISTENT_SM_COUNTS = {{}}  # device: its SM count, so the host asks once per device


def {_HELPER}(tensor):
    """SMs of ``tensor``'s GPU; {_CPU_SMS} off CUDA, so that a persistent program walks several tiles."""
    device = tensor.device
    if device not in _PERSISTENT_SM_COUNTS:
        _PERSISTENT_SM_COUNTS[device] = (torch.cuda.get_device_properties(device).multi_processor_count
                                         if device.type == "cuda" else {_CPU_SMS})
    return _PERSISTENT_SM_COUNTS[device]


'''


@dataclass
class _Template:
    kernel: ast.FunctionDef
    pid: ast.Assign  # ``pid = tl.program_id(0)...``: it and all after it become the loop's body
    index_dtype: str  # the dtype ``pid`` is cast to
    launcher: ast.FunctionDef
    launch: ast.stmt  # the launcher's statement that launches the kernel
    prefix: str  # "K0_": the kernel's tunable constants
    extents: dict[str, int]  # M, N
    blocks: dict[str, str]  # BLOCK_M, BLOCK_N at the launch: a literal or the launch's expression


def _names(nodes, context) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, context)}


def _literals(fn: ast.FunctionDef, names) -> dict[str, int]:
    """Top-level ``M = 100`` style assignments of ``fn``."""
    return {node.targets[0].id: node.value.value for node in fn.body
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in names and isinstance(node.value, ast.Constant) and type(node.value.value) is int}


def _template(tree: ast.Module, fn: ast.FunctionDef) -> _Template | str | None:
    """``fn`` as a GEMM template this operator can make persistent; a reason where it is one it
    must refuse; None where it is not one at all (or is persistent already)."""
    text = ast.unparse(fn)
    pids = [i for i, n in enumerate(fn.body) if isinstance(n, ast.Assign) and ast.unparse(n.targets) == "pid"
            and _PID.fullmatch(ast.unparse(n.value))]
    loops = [i for i, n in enumerate(fn.body) if isinstance(n, ast.For) and ast.unparse(n.target) == "k_idx"
             and ast.unparse(n.iter) == _LOOP]
    extents = _literals(fn, ("M", "N"))
    # one program axis, its id read once (a second read would be the program's, not the tile's)
    if (len(pids) != 1 or len(loops) != 1 or loops[0] < pids[0] or len(extents) != 2
            or text.count("program_id(") != 1 or "num_programs" in text or "_tile" in text
            or not {"pid_m", "pid_n", "acc"} <= _names(fn.body, ast.Store)):
        return None
    moved, kept = fn.body[pids[0]:], fn.body[:pids[0]]
    if any(isinstance(n, ast.Return) for n in ast.walk(ast.Module(moved, []))):
        return f"{fn.name}: a return after pid would end the program's walk over its tiles"
    if _names(moved, ast.Store) & _names(kept, ast.Store):
        # reassigned in the loop, a name set before it is carried across iterations: its type may change
        return f"{fn.name}: names set before pid are set again after it"
    pinned = {n.target.id: ast.unparse(n.value) for n in fn.body if isinstance(n, ast.AnnAssign)
              and isinstance(n.target, ast.Name) and n.value is not None}
    for launcher, stmt, call in grid_launches(tree, fn):
        keywords = {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg}
        # the block sizes at the launch: the launch's (K0_BLOCK_M), else pinned in the kernel
        blocks = {b: keywords.get(b, pinned.get(b)) for b in ("BLOCK_M", "BLOCK_N")}
        prefix = next((m.group(1) for v in keywords.values() if (m := re.match(r"(K\d+_)", v))), None)
        if all(blocks.values()) and prefix:
            dtype = _PID.fullmatch(ast.unparse(fn.body[pids[0]].value)).group(1) or "tl.int32"
            return _Template(fn, fn.body[pids[0]], dtype, launcher, stmt, prefix, extents, blocks)
    return None


class PersistentTiles(KernelRewrite):
    """Make a GEMM template persistent: programs loop over the output tiles (see the module's text)."""

    name = "persistent_tiles"
    nothing = "no GEMM template (literal M and N, one program axis) that is not persistent already"

    def __init__(self, *, programs_per_sm: int = 1):
        """``programs_per_sm``: the child's first ``K<n>_PROGRAMS_PER_SM``, a power of two (the
        constants operator and the sweep move it from there)."""
        if programs_per_sm < 1 or programs_per_sm & (programs_per_sm - 1):
            raise ValueError(f"programs_per_sm must be a power of two (1, 2, 4, ...), not {programs_per_sm}")
        self.programs_per_sm = programs_per_sm

    def candidates(self, source: str) -> tuple[list[_Template], list[str]]:
        if not re.search(r"^import torch$", source, re.M):  # the launcher asks torch for the SM count
            return [], []
        return super().candidates(source)

    def analyse(self, tree: ast.Module, fn: ast.FunctionDef) -> _Template | str | None:
        return _template(tree, fn)

    def rewrite(self, source: str, template: _Template) -> Proposal:
        child = persistent_source(source, template, self.programs_per_sm)
        return Proposal(self.name, child, f"{template.kernel.name}: persistent over its tiles, "
                                          f"{self.programs_per_sm} program(s) per SM to start")


def _indented(lines: list[str]) -> list[str]:
    return ["    " + line if line.strip() else line for line in lines]


def persistent_source(source: str, t: _Template, programs_per_sm: int) -> str:
    """``source`` with template ``t`` made persistent (see the module's text)."""
    lines = source.splitlines(keepends=True)
    fn, pid = t.kernel, t.pid
    pad = " " * pid.col_offset
    loop = [f"{pad}# persistent: each program walks the tiles num_programs apart, the template's body per tile\n",
            f"{pad}_num_tiles = ((M + BLOCK_M - 1) // BLOCK_M) * ((N + BLOCK_N - 1) // BLOCK_N)\n",
            f"{pad}for _tile in range(tl.program_id(0), _num_tiles, tl.num_programs(0)):\n",
            # tl.cast, not .to: the CPU interpreter's loop variable is a Python int
            f"{pad}    pid = tl.cast(_tile, {t.index_dtype})\n"]
    body = _indented(lines[pid.end_lineno:fn.end_lineno])
    lpad = " " * t.launch.col_offset
    tiles = f"triton.cdiv({t.extents['M']}, {t.blocks['BLOCK_M']}) * triton.cdiv({t.extents['N']}, {t.blocks['BLOCK_N']})"
    device = ast.unparse(t.launch.value.args[0])
    grid = [f"{lpad}# persistent: at most {t.prefix}PROGRAMS_PER_SM programs per SM, never more than tiles\n",
            f"{lpad}grid = (min({tiles}, {t.prefix}PROGRAMS_PER_SM * {_HELPER}({device})), 1, 1)\n"]
    # the launcher's own grid (and the comments just above it) give way to the persistent one
    old = [s for s in t.launcher.body[:t.launcher.body.index(t.launch)]
           if isinstance(s, ast.Assign) and ast.unparse(s.targets) == "grid"]
    if old:
        start = old[-1].lineno - 1
        while start > t.launcher.lineno and lines[start - 1].strip().startswith("#"):
            start -= 1
        grid_edit = (start, old[-1].end_lineno, grid)
    else:
        grid_edit = (t.launch.lineno - 1, t.launch.lineno - 1, grid)
    edits = [grid_edit, (pid.lineno - 1, fn.end_lineno, loop + body)]
    if f"def {_HELPER}(" not in source:  # one helper for all the module's persistent kernels
        at = min([t.launcher.lineno, *(d.lineno for d in t.launcher.decorator_list)]) - 1
        edits.append((at, at, [_SM_HELPER]))
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):  # bottom up
        lines[start:end] = new
    text = "".join(lines)
    # the new tunable after the kernel's other constants
    last = list(re.finditer(rf"^{t.prefix}\w+ = \d+\n", text, re.M))
    at = last[-1].end() if last else 0
    return text[:at] + f"{t.prefix}PROGRAMS_PER_SM = {programs_per_sm}\n" + text[at:]

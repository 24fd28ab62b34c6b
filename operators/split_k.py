"""Offline split-K rewrite of a GEMM template: the reduction over K spread across programs.

Needs no LLM.  Inductor's Triton GEMM template gives each program one BLOCK_M x BLOCK_N tile of
the output and walks the whole of K.  Where the output has few tiles and K is long, most of the
GPU idles: KernelBench's level-1 ``Matmul_with_large_K_dimension`` (M = N = 256, K = 524288) has 4
tiles of 128 x 128 for 132 SMs, and its seed ran at 0.014x torch.compile (cuBLAS splits K there;
experiments/kernelbench_seeds.md).  The same seed of ``Matrix_vector_multiplication`` (K = 1M)
was also incorrect, its one running fp32 sum per output 2e-4 off.

The child launches the template twice, from one kernel text:

- ``<kernel>_split_k`` on a grid of (tiles, SPLIT_K): program (t, s) sums its tile over the s-th
  of SPLIT_K equal runs of BLOCK_K steps and stores the partial tile, fp32, into a workspace
  ``(SPLIT_K, M, N)``; the loop body is the template's own, so its loads and masks are unchanged
  (a run of whole BLOCK_K steps keeps ``EVEN_K`` true);
- ``<kernel>`` itself, on its own grid, with its loop over K replaced by the sum of the tile's
  SPLIT_K partials in a fixed order, then the template's epilogue (bias, activations, the store)
  as it was.

No atomics: the result is deterministic.  ``K<n>_SPLIT_K`` is a tunable constant (the constants
operator and the sweep move it); the launcher takes the largest split at most that which divides
the number of BLOCK_K steps and keeps the workspace within 2**28 floats.  It applies to a template whose tiles (at the parent's tile) number at
most ``max_tiles`` and whose K takes at least ``min_k_steps`` steps; only templates with literal
M, N and K (inductor compiled for fixed shapes) and one tile axis (not a batched product).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import numpy as np

from evo.core.kernel_facts import grid_launches, top_level_kernels
from evo.core.kernel_source import find_tunables, parse, with_values
from operators.base import Context, Operator, Proposal

_LOOP = "range(0, tl.cdiv(K, BLOCK_K))"
_WORKSPACE_FLOATS = 1 << 28  # 1 GiB of fp32 partials at most
# A first SPLIT_K gives at most two programs per SM of an H100 (132): one wave where two fit.  On
# an H200, level1/6 split at a 64 x 64 tile ran 1.45x cuBLAS's time in 256 or 1,024 programs,
# 1.67x in 512 (1.3 waves: the last SMs idle; experiments/split_k.md).
_PROGRAMS = 264


@dataclass
class _Template:
    kernel: ast.FunctionDef
    loop: ast.For
    launch: ast.stmt  # the launcher's statement that launches the kernel
    call: ast.Call
    prefix: str  # "K0_": the kernel's tunable constants
    extents: dict[str, int]  # M, N, K
    block_k: str  # BLOCK_K's value at the launch: a literal or the launch's expression


def _literal_extents(kernel: ast.FunctionDef) -> dict[str, int]:
    found = {}
    for node in kernel.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("M", "N", "K") and isinstance(node.value, ast.Constant)
                and type(node.value.value) is int):
            found[node.targets[0].id] = node.value.value
    return found


def _names(nodes, context) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, context)}


def _template(tree: ast.Module, fn: ast.FunctionDef) -> _Template | None:
    """``fn`` as a GEMM template this operator can split, with its launch; None if it is not one."""
    text = ast.unparse(fn)
    loops = [n for n in fn.body if isinstance(n, ast.For) and ast.unparse(n.target) == "k_idx"
             and ast.unparse(n.iter) == _LOOP]
    extents = _literal_extents(fn)
    if (len(loops) != 1 or len(extents) != 3 or "program_id(1)" in text or "program_id(2)" in text
            or "ws_ptr" in text or not {"pid_m", "pid_n", "acc"} <= _names(fn.body, ast.Store)):
        return None
    loop = loops[0]
    suffix = fn.body[fn.body.index(loop) + 1:]
    # the epilogue must not read what only the loop computed (it rematerialises its indices)
    if (_names(suffix, ast.Load) & _names([loop], ast.Store)) - _names(suffix, ast.Store) - {"acc"}:
        return None
    for _, stmt, call in grid_launches(tree, fn):
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        prefix = re.fullmatch(r"(K\d+_)BLOCK_M", ast.unparse(keywords.get("BLOCK_M", ast.Constant(0))))
        pinned = [n for n in fn.body if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "BLOCK_K"]
        block_k = (ast.unparse(keywords["BLOCK_K"]) if "BLOCK_K" in keywords else
                   ast.unparse(pinned[0].value) if pinned and pinned[0].value is not None else None)
        if prefix and block_k:
            return _Template(fn, loop, stmt, call, prefix.group(1), extents, block_k)
    return None


def _value(expression: str, constants: dict[str, int]) -> int | None:
    return int(expression) if expression.isdigit() else constants.get(expression)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class SplitK(Operator):
    """Split a GEMM template's reduction over K across programs (see the module's text)."""

    name = "split_k"

    def __init__(self, *, max_tiles: int = 256, min_k_steps: int = 8):
        """``max_tiles``: split only templates with at most this many output tiles at the parent's
        tile; ``min_k_steps``: and at least this many BLOCK_K steps along K."""
        if max_tiles < 1 or min_k_steps < 2:
            raise ValueError("max_tiles must be at least 1 and min_k_steps at least 2")
        self.max_tiles, self.min_k_steps = max_tiles, min_k_steps

    def candidates(self, source: str) -> list[tuple[_Template, int, int]]:
        """Each template this operator would split: (template, tiles, BLOCK_K steps)."""
        try:
            tree = parse(source)
        except SyntaxError:
            return []
        constants, found = {t.name: t.value for t in find_tunables(source, tree)}, []
        for fn in top_level_kernels(tree):
            if template := _template(tree, fn):
                m, n, k = (template.extents[d] for d in "MNK")
                block_m, block_n = (constants.get(template.prefix + f"BLOCK_{d}") for d in "MN")
                block_k = _value(template.block_k, constants)
                if block_m and block_n and block_k:
                    tiles, steps = _cdiv(m, block_m) * _cdiv(n, block_n), _cdiv(k, block_k)
                    if tiles <= self.max_tiles and steps >= self.min_k_steps:
                        found.append((template, tiles, steps))
        return found

    def applies_to(self, parent) -> bool:
        return bool(self.candidates(parent.source))

    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        source = context.parent.source
        found = self.candidates(source)
        if not found:
            return Proposal(self.name, None, f"no GEMM template with at most {self.max_tiles} tiles and "
                                             f"{self.min_k_steps} or more steps along K")
        template, tiles, steps = found[int(rng.integers(len(found)))]
        split = first_split(tiles, steps)
        child = split_source(source, template, split)
        return Proposal(self.name, child, f"{template.kernel.name}: K in {split} parts "
                                          f"({tiles} tiles, {steps} steps of BLOCK_K)")


def first_split(tiles: int, steps: int) -> int:
    """SPLIT_K to start from: doubled from 2 while the programs stay within ``_PROGRAMS`` and each
    part keeps at least 4 steps of BLOCK_K."""
    split = 2
    while split * 2 * tiles <= _PROGRAMS and split * 2 <= steps // 4:
        split *= 2
    return split


# A seed starts split only where its tiles leave most of a GPU idle (at most half an H100's 132
# SMs) and K is long: KernelBench's long-K products (4 Matrix_vector, 6 Matmul_with_large_K) and
# none of its GEMMs with 256 or more tiles, where a split costs a second launch for little.
SEED_MAX_TILES, SEED_MIN_K_STEPS = 66, 32
# Split, the programs come from K, so the tile is set for each program's throughput, not for their
# number: inductor's 32 x 32 (tuned unsplit, for 64 programs) ran level1/6 split at 3.4x cuBLAS's
# time on an H200, a 64 x 64 tile split 16 ways at 1.33x on an H100 (experiments/split_k.md).
SEED_SPLIT_TILE = 64


def _widened(source: str, template: _Template, tile: int) -> str:
    """``source`` with the template's BLOCK_M and BLOCK_N raised to ``tile`` where its extent
    allows (a power of two: the seed stays correct at any)."""
    tunables = {t.name: t for t in find_tunables(source)}
    changes = {t: tile for d in "MN" if (t := tunables.get(f"{template.prefix}BLOCK_{d}")) is not None
               and t.value < tile <= template.extents[d]}
    return with_values(source, changes) if changes else source


def split_seed(source: str, tile: int = SEED_SPLIT_TILE) -> str | None:
    """``source`` with every GEMM template of few tiles and a long K split (at :func:`first_split`),
    its tile at least ``tile`` square where the output allows, or None where none is so: the first
    kernel a run seeds such a task with (``evo.loop.startup.starting_kernels``)."""
    operator, split, done = SplitK(max_tiles=SEED_MAX_TILES, min_k_steps=SEED_MIN_K_STEPS), source, set()
    while found := [c for c in operator.candidates(split) if c[0].kernel.name not in done]:
        widened = _widened(split, found[0][0], tile)
        if widened != split:  # its tiles and steps counted again at the new tile
            split = widened
            continue
        template, tiles, steps = found[0]
        split = split_source(split, template, first_split(tiles, steps))
        done.add(template.kernel.name)
    if not done:
        return None
    return ("# The seed with its GEMM templates of few tiles and a long K split across programs\n"
            "# (operators.split_k.split_seed); the run seeds it unsplit beside it.\n") + split


def split_source(source: str, t: _Template, split: int) -> str:
    """``source`` with template ``t`` launched as two kernels (see the module's text)."""
    lines = source.splitlines(keepends=True)
    fn, loop = t.kernel, t.loop
    pad = " " * loop.col_offset
    inner = " " * (loop.col_offset + 4)
    m, n = t.extents["M"], t.extents["N"]
    tile = [f"{pad}_ws_rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n",
            f"{pad}_ws_rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)\n",
            f"{pad}_ws_mask = (_ws_rm[:, None] < M) & (_ws_rn[None, :] < N)\n"]
    header = lines[fn.lineno - 1:fn.body[0].lineno - 1]
    signature = "".join(header)
    cut = signature.rindex("):")
    signature = signature[:cut] + ", ws_ptr, SPLIT_K: tl.constexpr" + signature[cut:]
    decorators = lines[fn.decorator_list[0].lineno - 1:fn.lineno - 1]
    prologue = lines[fn.body[0].lineno - 1:loop.lineno - 1]
    body = lines[loop.lineno:loop.end_lineno]  # the loop's body, its header left out
    epilogue = lines[loop.end_lineno:fn.end_lineno]
    partial = (decorators + [signature.replace(f"def {fn.name}(", f"def {fn.name}_split_k(", 1)] + prologue
               + [f"{pad}# this program's run of BLOCK_K steps, the s-th of SPLIT_K (which divides them: see the\n",
                  f"{pad}# launcher); a loop of a constant count, its bounds independent of the program\n",
                  f"{pad}_k_run = tl.cdiv(K, BLOCK_K) // SPLIT_K\n",
                  f"{pad}_pid_k = tl.program_id(1)\n",
                  f"{pad}for _k_step in range(0, _k_run):\n",
                  f"{inner}k_idx = _pid_k * _k_run + _k_step\n"]
               + body + ["\n"] + tile
               + [f"{pad}_ws = ws_ptr + _pid_k.to(tl.int64) * (M * N) + _ws_rm[:, None] * N + _ws_rn[None, :]\n",
                  f"{pad}tl.store(_ws, acc, _ws_mask)\n", "\n\n"])
    total = ([signature] + prologue + [f"{pad}# the tile summed over K: its SPLIT_K partials, in order\n"] + tile
             + [f"{pad}_ws = ws_ptr + _ws_rm[:, None] * N + _ws_rn[None, :]\n",
                f"{pad}for _split in range(0, SPLIT_K):\n",
                f"{inner}acc += tl.load(_ws, mask=_ws_mask, other=0.0).to(ACC_TYPE)\n",
                f"{inner}_ws += M * N\n"] + epilogue)
    launch_pad = " " * t.launch.col_offset
    call = ast.get_source_segment(source, t.call)
    arguments = call[call.index("[grid](") + len("[grid]("):-1]
    device = ast.unparse(t.call.args[0])
    cap = max(1, _WORKSPACE_FLOATS // max(1, m * n))
    launch = [f"{launch_pad}# split-K: partial tiles into a workspace, then their sum and the epilogue\n",
              f"{launch_pad}_steps = triton.cdiv({t.extents['K']}, {t.block_k})\n",
              f"{launch_pad}_split = max(1, min({t.prefix}SPLIT_K, _steps, {cap}))\n",
              f"{launch_pad}while _steps % _split:  # equal runs of whole steps: the largest split that divides them\n",
              f"{launch_pad}    _split -= 1\n",
              f"{launch_pad}_ws = torch.empty((_split, {m}, {n}), dtype=torch.float32, device={device}.device)\n",
              f"{launch_pad}{fn.name}_split_k[(grid[0], _split, 1)]({arguments}, ws_ptr=_ws, SPLIT_K=_split)\n",
              f"{launch_pad}{fn.name}[grid]({arguments}, ws_ptr=_ws, SPLIT_K=_split)\n"]
    # edits from the bottom up, so that earlier line numbers stay valid
    edits = sorted([(t.launch.lineno - 1, t.launch.end_lineno, launch),
                    (fn.decorator_list[0].lineno - 1, fn.end_lineno, partial + decorators + total)],
                   reverse=True)
    for start, end, new in edits:
        lines[start:end] = new
    text = "".join(lines)
    # the new tunable after the kernel's other constants
    last = [m for m in re.finditer(rf"^{t.prefix}\w+ = \d+\n", text, re.M)]
    at = last[-1].end() if last else 0
    return text[:at] + f"{t.prefix}SPLIT_K = {split}\n" + text[at:]

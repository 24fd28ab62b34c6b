"""Inductor's calls into cuDNN in a seed, made launches of the Triton convolution.

``evaluator.compile_seed`` turns inductor's output into a seed; where that output calls cuDNN
(``bufN = extern_kernels.convolution(x, w, stride=..., ...)``), each call becomes a launch of
``evaluator.conv_launch._convolution`` (whose text, with its kernels', the seed carries: :data:`CONV_LIBRARY`) with
its own tunable constants: the tile it starts from (:func:`seed_tile`, by the weight's shape
where inductor's wrapper states it) and, where the convolution could run either reduction loop,
a switch between them.
"""
from __future__ import annotations

import ast
import re

from evaluator import conv_library

# what a seed carries of the convolution: conv_geometry.py's helpers, conv_kernel.py's kernels, then
# conv_launch.py's host side (evaluator.conv_library)
CONV_LIBRARY = conv_library.seed_text()
_CONVOLUTION = re.compile(r"^(\s*)(\w+) = extern_kernels\.convolution\((.*)\)\s*$")


def _layout_of(buffer: str, lines: list[str]) -> str:
    """``, out_size=(...), out_stride=(...)`` from the ``assert_size_stride`` inductor wrote for
    ``buffer`` after computing it: the layout its consumers index it with."""
    for line in lines:
        if line.strip().startswith(f"assert_size_stride({buffer},"):
            call = ast.parse(line.strip()).body[0].value
            return f", out_size={ast.unparse(call.args[1])}, out_stride={ast.unparse(call.args[2])}"
    return ""


def seed_tile(weight_shape: tuple[int, ...] | None, transposed: bool, groups: int, *, strided: bool,
              precision: str) -> tuple[int, int, int, int, int]:
    """The tile a seed's convolution starts from (``block_m, block_n, block_k, num_warps,
    num_stages``), by its output channels per group and the loop it starts in (the general loop
    below 16 input channels a group, unless transposed with a stride: :func:`_taps_loop_first`),
    where the weight's shape is known; ``strided``: a stride above 1 along some dimension;
    ``precision``: its products' (a taps loop with exact ones and many outputs starts wide).

    From ``experiments/conv_tile_probe.py`` on the 18 convolutions of the drawn KernelBench
    sample (H200, fp32 products exact; ``experiments/kernelbench_search.md``, section 6): with 64
    or more output channels a group, 128x64 tiles in three stages ran 1.5-4.2x faster than 64x32 in
    two; with 32, 64x32 stayed best, and with 16, 64x16 ran 1.3x faster than 64x32 (a wider tile
    computes empty columns).  One channel a group (depthwise) takes the direct kernel: 256
    positions a program ran 37x faster than the tiled kernel, and 1.2x faster than cuDNN.

    The wide tile reduces 16 channels a step, not 32: with the packed weight of section 11, that
    tile at 32 spilled up to 188 registers in fp32 (7 of 14 seeds 30 or more), and in the strict record of section 13 the
    children whose only change from the seed was BLOCK_K 32 -> 16 ran at 0.50-0.96x its time on
    all 9 convolutions that had one (median 0.56x)."""
    if weight_shape is None or len(weight_shape) < 3:
        return (64, 16 if groups > 1 else 32, 32, 4, 2)
    per_group = _per_group(weight_shape, transposed, groups)[1]
    if per_group == 1:
        return (256, 16, 32, 4, 2)
    taps_first = _taps_loop_first(weight_shape, transposed, groups, strided)
    if precision == "ieee" and taps_first and per_group >= WIDE_SPLIT_CHANNELS:
        return WIDE_SPLIT_TILE
    if precision == "tf32" and taps_first and not strided and per_group >= 64:
        return SHIFTED_WIDE_TILE if per_group >= WIDE_TF32_CHANNELS else SHIFTED_TILE
    if precision == "tf32" and taps_first and per_group >= WIDE_TF32_CHANNELS:
        return WIDE_TF32_TILE
    if per_group > 16 and not taps_first:
        return GENERAL_LOOP_TILE if per_group <= 32 else GENERAL_LOOP_WIDE_TILE
    if per_group >= 64:
        return (128, 64, 16, 4, 3)
    return (64, 16 if per_group <= 16 else 32, 32, 4, 2)


# The general loop (fewer than 16 inputs a group, not transposed with a stride) with 17 to 32
# output channels a group, and with more.  Since its gather's lanes run along output positions, on
# an H200 (experiments/kernelbench_search.md, section 24; fp32 products exact): l2_7's Conv3d (8
# inputs, 32 outputs) ran 4.01 ms at 256 x 32 x 16 in four warps against 5.02 at 128 x 32 x 32, the
# tile before (cuDNN 4.39); l2_67's Conv2d (8 inputs, 64 outputs) 3.02 ms at 128 x 64 x 16 in two
# stages against 4.73 at 128 x 64 x 32 in three (cuDNN 4.19).  With the reduction's taps outermost
# (same section), 3.14 and 2.75 ms at these tiles, still the fastest timed.
GENERAL_LOOP_TILE = (256, 32, 16, 4, 2)
GENERAL_LOOP_WIDE_TILE = (128, 64, 16, 4, 2)


# A call site starting in the taps loop with exact products and this many output channels a group
# or more starts from a 128 x 128 tile in eight warps (64 accumulator floats a thread): the tile its strict twin
# splits in (evo.core.dot_precision.seed_kernels).  On an H100 (experiments/kernelbench_search.md,
# section 20) l1_69 (128 outputs) split channels-last ran 6.21 ms at it against 7.69 at 128 x 64 in
# four warps; in the strict record of section 21 its best kept the narrower tile (7.48 ms on H200s).
WIDE_SPLIT_CHANNELS = 128
WIDE_SPLIT_TILE = (128, 128, 16, 8, 3)


# A call site starting in the taps loop in TF32 (the kernelbench tolerance, which gathers
# channels-last) with this many output channels a group or more starts from a 128 x 128 tile
# reducing 32 channels a step, in four warps.  On one H200 (experiments/kernelbench_search.md,
# section 30; experiments/conv_tile_probe.py, the convolution alone, its channels-last copy
# included) it ran 1.16-1.61x faster than the 128 x 64 x 16 tile before on all 26 such
# convolutions of KernelBench's levels 1 and 2 (l1_69 4.60 to 3.27 ms, l2_77 7.70 to 4.79), and
# 256 x 128 x 32 in eight warps was faster on two of them only, by 0.2% at most.
WIDE_TF32_CHANNELS = 128
WIDE_TF32_TILE = (128, 128, 32, 4, 3)


# A call site starting in the taps loop at stride 1 in TF32 runs shifted windows over a padded
# channels-last copy (evaluator/conv_shifted.py) from these tiles: 64 output channels a group or
# more, and 128 or more.  On one H200 (experiments/kernelbench_search.md, section 31; the
# convolution alone, its copy included) the first was the fastest of five tiles or within 5% of it
# on the six such convolutions of the sample with 64 (l1_57 4.42 ms, cuDNN 5.18), the second on
# both with 128 (l1_69 2.23 ms, cuDNN 2.60; l2_1 1.48, cuDNN 2.73).
SHIFTED_TILE = (128, 64, 32, 4, 3)
SHIFTED_WIDE_TILE = (128, 128, 32, 8, 3)


def shifted_first(weight_shape: tuple[int, ...], transposed: bool, groups: int, precision: str,
                  strided: bool) -> bool:
    """Whether a call site starting in the taps loop starts from shifted windows over a padded
    channels-last copy (``evaluator/conv_shifted.py``; the launch runs them at stride 1, or transposed
    with a stride a launch a phase, where the GPU has TMA and the taps loop gathers channels-last).
    A strided transposed site gets a switch of its own instead (``USE_SHIFTED_PHASES``), off: not
    yet timed on a GPU.  On one H200 (``kernelbench_search.md``,
    section 31), in TF32 at the sample's stride-1 convolutions from 16 channels a group, 1.16-1.81x
    faster than the gather it replaces (l1_57 6.59 to 4.42 ms, l2_10 6.36 to 4.41, l1_68 13.96 to
    8.18), the copy included; with three TF32 products of split operands 1.05-1.27x faster than the
    split gather on 7 of 8 (l1_74, 1-D, level at best and 1.15x slower at the twin's tile: a strict
    1-D site gets no switch); with exact
    products 3-60x slower (the switch starts off there; the strict twin, split, turns it on:
    ``evo.core.dot_precision``).  Below 16
    channels a group the general loop comes first, and faster: l2_67's 8 channels 1.68 ms against
    2.06 shifted.  Below 64 output channels a group (tiles of 32 or 16) the split twin ran 1.04-1.33x
    slower shifted on all three of levels 1 and 2 (l1_58, l1_61, l1_70): the switch starts off there,
    in either precision."""
    inputs, outputs = _per_group(weight_shape, transposed, groups)
    return precision == "tf32" and not strided and inputs >= 16 and outputs >= 64


def channels_last_first(weight_shape: tuple[int, ...], transposed: bool, groups: int, precision: str,
                        strided: bool = False) -> bool:
    """Whether the taps loop starts from the channels-last gather (else the NCHW one); where the
    call site has the switch, the search may flip it.  With the seed's tile on the 18 convolutions
    of the KernelBench sample (H200, ``experiments/kernelbench_search.md``, section 17): in TF32
    channels-last ran 1.25-3.5x faster on 9 of the 11 from 16 channels a group, 1-D ones included
    (l1_74 2.93 to 1.05 ms), 1.05x on l1_79 and 1% slower on l1_81; with fp32 products exact it
    ran 1.02-2.4x slower on all 11 (l2_10 14.7 to 35.7 ms).  Below 16 channels, where only a strided
    transposed convolution starts from the taps loop (l2_72, l2_96: 3 channels, 3-D, stride 2), the
    NCHW gather ran faster in every record's archive, the children whose change from the seed was
    mostly that flip: under the kernelbench tolerance 2.98 ms against the seed's 4.78 (l2_96,
    section 17) and 3.20 against 4.74 (l2_72, section 29); with exact products 3.45 and 3.25 against
    6.59 and 6.57 (section 17).  The general loop's sites below 16 channels keep the channels-last
    gather should the taps loop be switched on (timed there in section 17, NCHW not).  Under the
    strict tolerance a seed whose call sites all start from the taps loop is seeded second, behind a
    twin gathering channels-last with its operands split into TF32 parts
    (``evo.core.dot_precision.seed_kernels``)."""
    if _per_group(weight_shape, transposed, groups)[0] >= 16:
        return precision == "tf32"
    return not (transposed and strided)


def _two_loops(weight_shape: tuple[int, ...] | None, transposed: bool, groups: int) -> bool:
    """Whether ``_convolution`` may run this convolution either way: more than one output channel a
    group (the taps loop, or the general one).  With the seeds' tiles on the 18 convolutions of the
    KernelBench sample (H200), the taps loop ran 2-16x faster transposed with a stride and 1.7-1.9x
    slower at stride 1 with many channels, before its weight was packed
    (``experiments/kernelbench_search.md``, sections 9 and 11): the search chooses."""
    if weight_shape is None or len(weight_shape) < 3:
        return False
    return _per_group(weight_shape, transposed, groups)[1] > 1


def _taps_loop_first(weight_shape: tuple[int, ...], transposed: bool, groups: int, strided: bool) -> bool:
    """Whether a call site that may run either loop starts from the taps loop: from 16 channels a
    group, as the records ran; below, only transposed with a stride, whose phases the taps loop
    skips.  With the seed's tile (H200, section 17), below 16 channels the taps loop ran 1.4-1.9x
    faster than the general one on l2_72 and l2_96 (3 channels, transposed 3-D, stride 2) and
    1.7-4.0x slower at stride 1 with 8 (l2_67, l2_82, l2_87, l2_7): the switch is the search's."""
    return _per_group(weight_shape, transposed, groups)[0] >= 16 or (transposed and strided)


def _per_group(weight_shape: tuple[int, ...], transposed: bool, groups: int) -> tuple[int, int]:
    """(input, output) channels a group, from the weight's shape: (out, in / groups, ...), or
    transposed (in, out / groups, ...)."""
    groups = max(1, groups)
    if transposed:
        return weight_shape[0] // groups, weight_shape[1]
    return weight_shape[1], weight_shape[0] // groups


def _convolution_shape(args: str, lines: list[str]) -> tuple[tuple[int, ...] | None, bool, int]:
    """The weight's shape (where inductor's wrapper states it: the graph input's
    ``assert_size_stride`` or the buffer's ``empty_strided_cuda``; None for a symbolic or unknown
    one), whether the convolution is transposed, and its groups, from a call's arguments."""
    try:
        call = ast.parse(f"f({args})").body[0].value
    except SyntaxError:
        return None, False, 1
    named = {k.arg: k.value for k in call.keywords}
    transposed = isinstance(named.get("transposed"), ast.Constant) and named["transposed"].value is True
    groups = named["groups"].value if isinstance(named.get("groups"), ast.Constant) else 1
    weight = call.args[1] if len(call.args) > 1 else named.get("weight")
    if not isinstance(weight, ast.Name):
        return None, transposed, groups
    for line in lines:
        text = line.strip()
        if text.startswith(f"assert_size_stride({weight.id},") or text.startswith(f"{weight.id} = empty_strided"):
            try:
                stated = ast.parse(text).body[0].value
                shape = ast.literal_eval(stated.args[1] if text.startswith("assert") else stated.args[0])
                return tuple(int(n) for n in shape), transposed, groups
            except (SyntaxError, ValueError, IndexError, AttributeError, TypeError):
                return None, transposed, groups
    return None, transposed, groups


def _strided(args: str) -> bool:
    """Whether a call's literal ``stride`` exceeds 1 along some dimension."""
    try:
        call = ast.parse(f"f({args})").body[0].value
        stride = next((k.value for k in call.keywords if k.arg == "stride"), None)
        values = ast.literal_eval(stride) if stride is not None else ()
    except (SyntaxError, ValueError):
        return False
    return any(int(v) > 1 for v in (values if isinstance(values, (list, tuple)) else (values,)))


def replace_convolutions(lines: list[str], first_index: int, precision: str = "ieee"
                         ) -> tuple[list[str], list[str], list[str]]:
    """Inductor's calls into cuDNN (``bufN = extern_kernels.convolution(x, w, stride=..., ...)``)
    replaced by launches of the Triton convolution (``evaluator.conv_launch``), its products in
    ``precision``: the wrapper's lines, and per call site its tunable constants and launcher
    (numbered from ``first_index``)."""
    out, constants, launchers = [], [], []
    for number, line in enumerate(lines):
        match = _CONVOLUTION.match(line)
        if not match:
            out.append(line)
            continue
        indent, buffer, args = match.groups()
        index = first_index + len(launchers)
        shape, strided = _convolution_shape(args, lines), _strided(args)
        taps_first = _two_loops(*shape) and _taps_loop_first(*shape, strided)
        block_m, block_n, block_k, warps, stages = seed_tile(*shape, strided=strided, precision=precision)
        names = [f"K{index}_BLOCK_M = {block_m}", f"K{index}_BLOCK_N = {block_n}", f"K{index}_BLOCK_K = {block_k}",
                 f"K{index}_NUM_WARPS = {warps}", f"K{index}_NUM_STAGES = {stages}"]
        choice = ""
        if _two_loops(*shape):  # which reduction loop is faster depends on the problem: a switch,
            # first of the call's constants, so that a sweep (one step of each in source order) flips it;
            # then whether the taps loop gathers from a channels-last copy of the input
            # (where the general loop comes first, the taps loop is tried in the gather
            # channels_last_first gives: a switch of its own would flip nothing while unused)
            # (and, with exact products, whether they come as three TF32 products of split operands:
            # off in the seed; on in its strict twin where every site starts from the taps loop,
            # evo.core.dot_precision.seed_kernels; in the general loop it ran 1.23-1.54x slower than
            # exact products on an H100, kernelbench_search.md section 22: the search's to switch on)
            gather = channels_last_first(*shape, precision, strided)
            shifted = ""
            if taps_first:
                names[:0] = [f"K{index}_USE_TAPS_LOOP = 1", f"K{index}_USE_CHANNELS_LAST = {int(gather)}"]
                gather = f"K{index}_USE_CHANNELS_LAST == 1"
                # shifted windows, where the taps loop gathers channels-last at stride 1; not offered to a
                # strict 1-D site, whose split twin ran 1.15x slower for them (shifted_first).  Transposed
                # with a stride, a launch a phase (evaluator/conv_shifted.py): a switch of its own, off to
                # start and left so by the strict twin (not yet timed on a GPU), for the search to flip
                if not strided and (precision == "tf32" or len(shape[0]) > 3):
                    names.insert(2, f"K{index}_USE_SHIFTED_WINDOWS = {int(shifted_first(*shape, precision, strided))}")
                    shifted = f", shifted=K{index}_USE_SHIFTED_WINDOWS == 1"
                elif strided and shape[1]:
                    names.insert(2, f"K{index}_USE_SHIFTED_PHASES = 0")
                    shifted = f", shifted=K{index}_USE_SHIFTED_PHASES == 1"
            else:
                names.insert(0, f"K{index}_USE_TAPS_LOOP = 0")
            split = ""
            if precision == "ieee":  # either loop
                names.insert(2 if taps_first else 1, f"K{index}_USE_SPLIT_TF32 = 0")
                split = f", split=K{index}_USE_SPLIT_TF32 == 1"
            choice = (f", taps_loop=K{index}_USE_TAPS_LOOP == 1,\n"
                      f"                        channels_last={gather}{split}{shifted}")
        constants.append("\n".join(names))
        launchers.append(f"def _launch_{index}(*args, **kwargs):\n"
                         f"    return _convolution(*args, **kwargs, block_m=K{index}_BLOCK_M, block_n=K{index}_BLOCK_N,"
                         f" block_k=K{index}_BLOCK_K,\n"
                         f"                        num_warps=K{index}_NUM_WARPS, num_stages=K{index}_NUM_STAGES{choice})\n")
        out.append(f"{indent}{buffer} = _launch_{index}({args}{_layout_of(buffer, lines[number + 1:number + 4])})")
    return out, constants, launchers

"""The precision of a kernel's fp32 matrix products, as text: read, moved, and the warps a tile
needs in split precision.  Used by the ``dot_precision`` operator (``operators/precision.py``,
whose module text says why) and by the seeds a run starts from (:func:`seed_kernels`).
"""
from __future__ import annotations

import functools
import os
import re

from evo.core.kernel_source import call_spans, find_tunables, with_values

# A dot's precision argument: ``input_precision="..."`` or ``allow_tf32=<expression>``.
_PRECISION = re.compile(r"""\binput_precision\s*=\s*(["'])(ieee|tf32x3|tf32|bf16x6|bf16x3)\1|\ballow_tf32\s*=\s*[\w.]+""")
_DOT = re.compile(r"\btl\.dot\(")

# fp32 products summed from several tensor-core products of the operands' parts: three TF32 products
# (CUTLASS's 3xTF32), six bf16 products of three-part operands, or three of two-part ones.  On one
# H200 (experiments/data/dot_precision_probe_h200_s53.json, a 1024 x 8192 x 8192 product against
# float64) tf32x3 and bf16x6 erred 1.6e-5 and 1.5e-5 (RMS), a fifth of cuBLAS's fp32 (8.4e-5);
# bf16x3 2.1e-4, plain TF32 3.9e-2.  Which is fastest depends on the kernel: level1/1 ran in 2.2x
# torch.compile's time in tf32x3, 0.78x in bf16x6 and 0.50x in bf16x3; level2/12 in 0.61x, 0.75x, 0.48x.
SPLIT_PRECISIONS = ("tf32x3", "bf16x6", "bf16x3")


@functools.cache
def split_precisions() -> tuple[str, ...]:
    """The split precisions this Triton compiles (bf16x3 and bf16x6 came after tf32x3), for NVIDIA
    GPUs or, where ``TRITON_INTERPRET=1``, for its interpreter (which has tf32x3 only)."""
    try:
        if os.environ.get("TRITON_INTERPRET") == "1":
            from triton.runtime.interpreter import InterpreterOptions as Options
        else:
            from triton.backends.nvidia.compiler import CUDAOptions as Options
        allowed = Options.allowed_dot_input_precisions
    except (ImportError, AttributeError):  # no such backend here: the precision Triton has had longest
        return ("tf32x3",)
    return tuple(p for p in SPLIT_PRECISIONS if p in allowed)


def dot_arguments(source: str) -> list[re.Match]:
    """The precision arguments inside ``tl.dot(...)`` calls (brackets matched)."""
    return [m for start, end in call_spans(source, _DOT) for m in _PRECISION.finditer(source, start, end)]


def current_precision(match: re.Match) -> str:
    return match.group(2) if match.group(2) else "allow_tf32"


ACCUMULATOR_PER_THREAD = 64  # fp32 accumulator floats a thread that split precision keeps unspilled
_MOST_WARPS = 16


def warps_for_split_precision(source: str) -> tuple[str, list[str]]:
    """``source`` with each tile's warps doubled until it holds at most 64 accumulator floats a
    thread (see the module's text), and what changed."""
    values = {t.name: t for t in find_tunables(source)}
    changes, said = {}, []
    for name, warps in values.items():
        if not name.endswith("NUM_WARPS") or warps.kind != "warps":
            continue
        prefix = name[:-len("NUM_WARPS")]
        block_m, block_n = values.get(prefix + "BLOCK_M"), values.get(prefix + "BLOCK_N")
        if block_m is None or block_n is None:
            continue
        count = warps.value
        while block_m.value * block_n.value > ACCUMULATOR_PER_THREAD * 32 * count and count < _MOST_WARPS:
            count *= 2
        if count != warps.value:
            changes[warps] = count
            said.append(f"{name} {warps.value}->{count}")
    return (with_values(source, changes) if changes else source), said


def with_precision(source: str, precision: str) -> str | None:
    """``source`` with every dot's precision argument set to ``precision``; None if nothing changes."""
    matches = [m for m in dot_arguments(source) if current_precision(m) != precision]
    if not matches:
        return None
    out, last = [], 0
    for m in sorted(matches, key=lambda m: m.start()):
        out += [source[last:m.start()], f'input_precision="{precision}"']
        last = m.end()
    return "".join(out) + source[last:]


# A seed's Triton convolutions (``evaluator.conv_seed``): a call site that starts from the taps loop,
# one that starts from the general loop, and the taps loop's gather switch where it is NCHW.
_TAPS_LOOP_FIRST = re.compile(r"^K\d+_USE_TAPS_LOOP = 1$", re.MULTILINE)
_GENERAL_LOOP_FIRST = re.compile(r"^K\d+_USE_TAPS_LOOP = 0$", re.MULTILINE)
_NCHW_GATHER = re.compile(r"^(K\d+_USE_CHANNELS_LAST = )0$", re.MULTILINE)
_UNSPLIT = re.compile(r"^(K\d+_USE_SPLIT_TF32 = )0$", re.MULTILINE)


def _shifted_for_split(source: str) -> str:
    """``source`` with shifted windows switched on (``USE_SHIFTED_WINDOWS``) at each convolution
    site whose tile spans 64 output channels or more, those narrower than 128 reducing 32 channels
    a step, not 16.  Split operands on one H200 (``experiments/kernelbench_search.md``, section 31):
    shifted, 1.05-1.27x faster than the split gather on the sample's 2-D convolutions with 64 and
    128 outputs; 1.04-1.33x slower at tiles 32 or 16 wide (l1_58, l1_61, l1_70); at 128 x 64 x 16
    in four warps (the exact seed's tile) 2.0-3.0x slower than at 128 x 64 x 32 (l1_57 25.5 against
    9.8 ms, l2_10 25.1 against 9.9), while 128 x 128 x 16 in eight warps ran the fastest of four
    tiles (l1_69 5.03 ms, l2_1 3.26)."""
    values = {t.name: t for t in find_tunables(source)}
    changes = {}
    for name, switch in values.items():
        if name.endswith("_USE_SHIFTED_WINDOWS") and switch.value == 0:
            prefix = name[:-len("USE_SHIFTED_WINDOWS")]
            block_n, block_k = values.get(prefix + "BLOCK_N"), values.get(prefix + "BLOCK_K")
            if block_n is None or block_k is None or block_n.value < 64:
                continue
            changes[switch] = 1
            if block_n.value < 128 and block_k.value == 16:
                changes[block_k] = 32
    return with_values(source, changes) if changes else source


def _exact_taps_loop_convolutions(source: str, tolerance: str) -> bool:
    """Whether ``source`` holds the engine's convolutions with exact fp32 products (the strict
    tolerance) and every call site starting from the taps loop.

    With the seed's tile on one H100 (``experiments/data/conv_seed_tf32x3_h100_s45.json``), the
    taps loop in tf32x3 gathering channels-last ran 1.6-2.1x faster than the strict seed (NCHW,
    exact) on the 2-D and 3-D convolutions with 16 or more channels a group (l1_57 26.1 to 14.5 ms,
    l1_69 21.6 to 11.1), within 2.5e-6 of cuDNN's fp32 output; in IEEE the same gather ran 1.02-2.4x
    slower (section 17), and neither gain holds for the general loop, which runs below 16 channels
    at stride 1 (l2_67 4.55 ms exact, 5.23 in tf32x3 channels-last).  With the operands split as
    they are copied (``USE_SPLIT_TF32``), in place of ``tf32x3``'s split in registers each step,
    the same tile ran 1.3-1.5x faster again on 9 of those 11 convolutions (l1_69 11.2 to 7.7 ms,
    l1_68 31.7 to 20.6; ``experiments/kernelbench_search.md``, section 20), 1.15x slower on l1_79
    (1-D, transposed, strided) and level on l1_81.  At stride 1 the twin's convolutions with 64
    output channels or more also run shifted windows over a padded copy (``USE_SHIFTED_WINDOWS``,
    ``evaluator/conv_shifted.py``; :func:`_shifted_for_split`)."""
    if tolerance == "kernelbench" or not _TAPS_LOOP_FIRST.search(source) or _GENERAL_LOOP_FIRST.search(source):
        return False
    return any(current_precision(m) == "ieee" for m in dot_arguments(source))


def seed_kernels(source: str, tolerance: str) -> tuple[str, ...]:
    """The seeds a run starts a task from, given the one derived from torch.compile: where that one
    holds inductor's GEMM templates (dots with an ``allow_tf32=`` flag, in IEEE fp32 on the CUDA
    cores where cuBLAS, which torch.compile calls, keeps fp32 too), first the same kernels with
    every dot on tensor cores, one in each split precision this Triton has (``SPLIT_PRECISIONS``),
    or one in plain TF32 under the ``kernelbench`` tolerance, then the derived one as it is, in
    case those miss the checks.  Likewise under
    the strict tolerance where it holds the engine's convolutions, each starting from the taps
    loop: first gathering from a channels-last copy of the input, as three TF32 products of operands
    split as they are copied (the library's dots in ``tf32x3`` where the search switches the split
    off; :func:`_exact_taps_loop_convolutions` says why); under the ``kernelbench`` tolerance they
    are derived in TF32 already.

    In the strict record of ``experiments/kernelbench_search.md`` (section 17) the derived GEMM
    seeds took 2.1x torch.compile's time; their first ``dot_precision`` children, these kernels,
    took 0.61x on all seven GEMM problems, every one correct.  Over all of KernelBench's levels 1
    and 2 on H200s (section 26), level2/18's tf32x3 twin missed the strict check (its sum over the
    product's outputs cancels) where its bf16x6 twin passed, at 0.76x torch.compile's time
    (``experiments/data/dot_precision_probe_h200_s53.json``)."""
    gemm = any(current_precision(m) == "allow_tf32" for m in dot_arguments(source))
    convolutions = _exact_taps_loop_convolutions(source, tolerance)
    if not gemm and not convolutions:
        return (source,)
    if tolerance == "kernelbench":
        precisions = ("tf32",)
    elif gemm:  # each split precision: which is fastest, and which passes, depends on the product
        precisions = split_precisions()
    else:  # the convolutions split their operands themselves (USE_SPLIT_TF32), tf32x3 behind it
        precisions = ("tf32x3",)
    twins = []
    for precision in precisions:
        moved = with_precision(source, precision)
        if moved is None:
            continue
        if precision in SPLIT_PRECISIONS:
            moved, _ = warps_for_split_precision(moved)
        gathered = ""
        if convolutions:
            moved = _shifted_for_split(_UNSPLIT.sub(r"\g<1>1", _NCHW_GATHER.sub(r"\g<1>1", moved)))
            gathered = (",\n# the convolutions gathering channels-last (shifted windows at stride 1 from 64"
                        " outputs), three TF32 products of operands split as they are copied")
        twins.append(f"# The seed derived from torch.compile with every dot in {precision}{gathered}\n"
                     "# (evo.core.dot_precision.seed_kernels); the run seeds the exact one beside it.\n" + moved)
    return (*twins, source)

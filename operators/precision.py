"""Offline rewrite of a kernel's fp32 matrix products onto tensor cores.

Needs no LLM.  An fp32 ``tl.dot`` in IEEE precision runs on the CUDA cores (an H100 has about
67 TFLOP/s of them in fp32, where cuBLAS keeps fp32 products too); in TF32 it runs on the tensor
cores, about seven times as fast, but with a 10-bit mantissa: about 5e-4 relative error, beyond
the strict fp32 tolerance (1e-4).  Split precision (Triton's ``input_precision="tf32x3"``, the
3xTF32 of CUTLASS) sums three TF32 products of the operands' high and low parts: nearly fp32's
accuracy at a third of TF32's rate, still above the CUDA cores'.  Newer Tritons add ``bf16x6``
(six bf16 products of three-part operands, as accurate) and ``bf16x3`` (three of two-part ones,
about ten times less accurate, yet within the strict check on plain GEMMs); which is fastest
depends on the kernel (``evo.core.dot_precision.SPLIT_PRECISIONS`` gives figures).

So the child's dots move, all at once, to one precision:

- a split precision (one this Triton has) from IEEE (``input_precision="ieee"``, the engine's
  convolution), from an ``allow_tf32=`` flag (inductor's GEMM templates) or from another split
  precision, under any tolerance: the evaluator's checks keep it only where it passes them; never
  from TF32, which it could only slow down;
- ``tf32`` only where the run's tolerance is ``kernelbench`` (1e-2), never under ``strict``.

Dots with no precision argument are left alone: Triton already runs those in TF32 for fp32.
A dot over fp16 or bf16 operands ignores the argument.

A split-precision child also gets more warps where a tile would hold more than 64 accumulator floats a
thread (``K<n>_BLOCK_M`` x ``K<n>_BLOCK_N`` over 32 ``K<n>_NUM_WARPS``): split precision keeps
each operand's high and low parts in registers as well.  In two H200 records
(experiments/kernelbench_search.md sections 8 and 13), the GEMM templates' 128 x 128 tile in four
warps spilled 172 registers under ``tf32x3`` and ran at 0.53x its IEEE seed's time, where eight
warps (or a 128 x 64 tile) spilled none and ran at 0.29x; plain TF32 did not spill in four.
"""
from __future__ import annotations

from typing import get_args

import numpy as np

from evaluator.choices import Tolerance, one_of
from evo.core.dot_precision import (ACCUMULATOR_PER_THREAD, SPLIT_PRECISIONS, current_precision, dot_arguments,
                                    split_precisions, warps_for_split_precision, with_precision)
from operators.base import Context, Operator, Proposal

class DotPrecision(Operator):
    """Move the parent's fp32 dots to a split precision (``tf32x3``, ``bf16x6``, ``bf16x3``) or,
    where the tolerance allows it, to plain TF32 (see the module's text)."""

    name = "dot_precision"

    def __init__(self, *, tolerance: Tolerance = "strict"):
        """``tolerance``: the evaluator's (``evaluator.tolerance``); plain TF32 only under ``kernelbench``."""
        one_of("operators.dot_precision.operator.tolerance", tolerance, get_args(Tolerance))
        self.tolerance = tolerance

    def _targets(self, current: set[str]) -> list[str]:
        """The precisions a parent whose dots are in ``current`` may move to: each split precision
        this Triton has (``split_precisions``) from dots more exact than plain TF32, among them
        another split precision; none from plain TF32, which a split could only slow down (a seed
        under the kernelbench tolerance starts there: evaluator.fp32_precision)."""
        split = [p for p in split_precisions() if current != {p}] if "tf32" not in current else []
        return split + (["tf32"] if self.tolerance == "kernelbench" else [])

    def applies_to(self, parent) -> bool:
        current = {current_precision(m) for m in dot_arguments(parent.source)}
        return any(with_precision(parent.source, p) is not None for p in self._targets(current))

    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        source = context.parent.source
        current = {current_precision(m) for m in dot_arguments(source)}
        if not current:
            return Proposal(self.name, None, "the parent has no dot with a precision argument")
        options = [(p, child) for p in self._targets(current) if (child := with_precision(source, p)) is not None]
        if not options:
            return Proposal(self.name, None, f"the parent's dots are already {'/'.join(sorted(current))}")
        precision, child = options[int(rng.integers(len(options)))]
        note = f"dots {'/'.join(sorted(current))} -> {precision}"
        if precision in SPLIT_PRECISIONS:
            child, warps = warps_for_split_precision(child)
            note += f" ({', '.join(warps)}: at most {ACCUMULATOR_PER_THREAD} accumulator floats a thread)" if warps else ""
        return Proposal(self.name, child, note)

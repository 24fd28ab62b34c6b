"""The comparison and the digest of :mod:`evaluator.compare` as single-pass Triton kernels, for
tensors on a GPU.

Done with PyTorch a chunk at a time, comparing two 6.4 GB outputs took some 400 chunks of a dozen
kernels each and about 0.3 s; a check digests and compares several such tensors, and the checks
of KernelBench's largest problems took seconds (``experiments/throughput_bench.md``).  Here each
tensor is read once: every program reduces a block to a row of partial results, and PyTorch
reduces the rows.  Values are compared in float64 as before.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from evaluator.guards import engine_kernel

BLOCK = 4096


@engine_kernel
@triton.jit
def _mismatch_kernel(e_ptr, a_ptr, out_ptr, n, atol, rtol, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    ef = tl.load(e_ptr + offs, mask=mask, other=0.0).to(tl.float64)
    af = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float64)
    e_nan, a_nan = ef != ef, af != af
    e_finite = tl.abs(ef) < float("inf")
    a_finite = tl.abs(af) < float("inf")
    e_inf = (~e_finite) & (~e_nan)
    err = tl.where(e_finite & a_finite, tl.abs(af - ef), 0.0)  # NaN or Inf in the candidate: counted apart
    excess = tl.where(e_finite, err - (atol + rtol * tl.abs(ef)), -1.0)
    row = out_ptr + pid.to(tl.int64) * 7
    tl.store(row + 0, tl.max((e_nan != a_nan).to(tl.float64), 0))
    tl.store(row + 1, tl.max((e_inf & (af != ef)).to(tl.float64), 0))
    tl.store(row + 2, tl.max((e_finite & (~a_finite)).to(tl.float64), 0))
    tl.store(row + 3, tl.sum((excess > 0).to(tl.float64), 0))
    tl.store(row + 4, tl.max(err, 0))
    worst = tl.max(excess, 0)
    tl.store(row + 5, worst)
    tl.store(row + 6, (pid.to(tl.int64) * BLOCK + tl.argmax(excess, 0)).to(tl.float64))


def mismatch_table(e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """Rows of [NaN differs, Inf differs, non-finite, bad count, max error, worst excess, its flat
    index] for the flat, contiguous float tensors ``e`` and ``a`` (on the device)."""
    n = e.numel()
    programs = triton.cdiv(n, BLOCK)
    out = torch.empty((programs, 7), dtype=torch.float64, device=e.device)
    _mismatch_kernel[(programs,)](e, a, out, n, float(atol), float(rtol), BLOCK=BLOCK, num_warps=8)
    best = int(out[:, 5].argmax()) if programs else 0
    return torch.stack([out[:, 0].max(), out[:, 1].max(), out[:, 2].max(), out[:, 3].sum(), out[:, 4].max(),
                        out[best, 5], out[best, 6]])[None]


@engine_kernel
@triton.jit
def _digest_kernel(x_ptr, out_ptr, n, key, BITS: tl.constexpr, CANONICAL: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    if CANONICAL:  # every NaN one NaN, -0.0 as 0.0: equal values, not equal bits
        x = tl.where(x != x, float("nan"), x + 0.0).to(x.dtype)
    if BITS == 8:
        words = x.to(tl.uint8, bitcast=True).to(tl.int64)
    elif BITS == 16:
        words = x.to(tl.int16, bitcast=True).to(tl.int64)
    elif BITS == 32:
        words = x.to(tl.int32, bitcast=True).to(tl.int64)
    else:
        words = x.to(tl.int64, bitcast=True)
    # A weight per position from a keyed hash of its index, odd, in wrapping 64-bit arithmetic.
    h = (offs + key) * -7046029254386353131  # odd multipliers, as signed 64-bit integers (literals:
    h = (h ^ (h >> 29)) * -4658895280553007687  # a compiled kernel reads no non-constexpr globals)
    weights = h | 1
    tl.store(out_ptr + pid, tl.sum(tl.where(mask, words * weights, 0), 0))


_KEY = int.from_bytes(os.urandom(7), "little")  # per process: a candidate cannot aim at a collision


def digest_of(t: torch.Tensor, canonical: bool) -> int:
    """A 64-bit fingerprint of the flat, contiguous tensor ``t`` (bool and complex already made plain)."""
    n = t.numel()
    programs = triton.cdiv(n, BLOCK)
    out = torch.empty(programs, dtype=torch.int64, device=t.device)
    x = t if (canonical and t.is_floating_point()) else t.view(
        {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    _digest_kernel[(programs,)](x, out, n, _KEY, BITS=8 * t.element_size(),
                                CANONICAL=canonical and t.is_floating_point(), BLOCK=BLOCK, num_warps=8)
    return int(out.sum()) & ((1 << 64) - 1)  # int64 sums wrap modulo 2**64

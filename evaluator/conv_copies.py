"""The Triton kernels of the copies the seeds' convolution makes before it runs
(``evaluator/conv_launch.py`` launches them): an input channels-last, a zero-padded channels-last
copy for the shifted windows, the weight packed, and each as its TF32 parts where the products are
split (three TF32 products stand for an fp32 one).  Kernels, not PyTorch's copies: the evaluator
counts a candidate's device time outside its own kernels against it.  A seed carries this module's
text below ``# --- seed ---`` before the host side's (``evaluator.conv_library``), so the imports
above the line are for this module run on its own.
"""
from __future__ import annotations

import triton
import triton.language as tl

# --- seed ---


@triton.jit
def _to_tf32(v):
    # v rounded to TF32's 10 mantissa bits, to nearest (ties away), as cvt.rna.tf32.f32 does: a value
    # tensor cores read exactly.  Not cut: the bits cut off all lean one way, and on an H100 cut
    # parts gave 3-26x tf32x3's error on the sample's convolutions, up to 2e-5 of the output's
    # largest value (kernelbench_search.md, section 20).  One that would round up to inf is cut.
    bits = v.to(tl.int32, bitcast=True)
    rounded = (bits + 4096) & -8192
    return tl.where((rounded & 0x7F800000) == 0x7F800000, bits & -8192, rounded).to(tl.float32, bitcast=True)


@triton.jit
def _tf32_parts(v):
    # v's TF32 part and the rest, itself in TF32 (about 2^-22 of v lost): three TF32 products of
    # such parts sum to nearly the fp32 product.  Inf and NaN keep to the first part.
    big = _to_tf32(v)
    big = tl.where(v != v, v, big)
    small = v - big
    return big, _to_tf32(tl.where(small == small, small, 0.0))


@triton.jit
def _split_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # a contiguous tensor's TF32 parts: the first to y, the rest n elements on
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    big, small = _tf32_parts(tl.load(x_ptr + offs, mask=offs < n))
    tl.store(y_ptr + offs, big, mask=offs < n)
    tl.store(y_ptr + n + offs, small, mask=offs < n)


@triton.jit
def _store_copy(to, tile, mask, SPLIT: tl.constexpr, lo):
    # a copy's tile stored as it is, or (SPLIT) its TF32 parts, the second lo elements after the first
    if SPLIT:
        big, small = _tf32_parts(tile)
        tl.store(to, big, mask=mask)
        tl.store(to + lo, small, mask=mask)
    else:
        tl.store(to, tile, mask=mask)


@triton.jit
def _channels_last_kernel(x_ptr, y_ptr, C, S, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr,
                          SPLIT: tl.constexpr = False, lo=0):
    # One (channels, positions) tile of a contiguous (N, C, S) input, written to (N, S, C): Triton
    # lays the load's lanes along positions and the store's along channels, turning the tile in
    # shared memory between them.  SPLIT: its TF32 parts, the second lo elements after the first.
    offs_s = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    base = tl.program_id(2).to(tl.int64) * C * S
    mask = (offs_c[:, None] < C) & (offs_s[None, :] < S)
    tile = tl.load(x_ptr + base + offs_c[:, None].to(tl.int64) * S + offs_s[None, :], mask=mask)
    to = y_ptr + base + offs_s[None, :].to(tl.int64) * C + offs_c[:, None]
    _store_copy(to, tile, mask, SPLIT, lo)


@triton.jit
def _pack_kernel(w_ptr, y_ptr, n, S1, S2, S3, st0, st1, st2, st3, BLOCK: tl.constexpr, SPLIT: tl.constexpr = False):
    # a 4-D strided view (the weight as the taps loop reads it) copied contiguous, in the view's order;
    # SPLIT: its TF32 parts, the second n elements after the first
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    at = (offs // (S3 * S2 * S1) * st0 + offs // (S3 * S2) % S1 * st1 + offs // S3 % S2 * st2
          + offs % S3 * st3)
    _store_copy(y_ptr + offs, tl.load(w_ptr + at, mask=mask), mask, SPLIT, n)


@triton.jit
def _padded_copy_kernel(x_ptr, y_ptr, C, D, H, W, DP, HP, WP, lead_d, lead_h, lead_w, sxn, sxc, sxd, sxh, sxw,
                        BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr, SPLIT: tl.constexpr = False, lo=0):
    # One (channels, positions) tile of the zero-padded channels-last copy (N, DP, HP, WP, C) of an
    # (N, C, D, H, W) input placed lead_* in (evaluator/conv_shifted.py): every position written,
    # zero where it falls outside the input.  SPLIT: its TF32 parts, the second lo elements on.
    offs_s = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    batch = tl.program_id(2).to(tl.int64)
    i_w = offs_s % WP - lead_w
    i_h = offs_s // WP % HP - lead_h
    i_d = offs_s // (WP * HP) - lead_d
    s_mask = offs_s < DP * HP * WP
    inside = s_mask & (i_w >= 0) & (i_w < W) & (i_h >= 0) & (i_h < H) & (i_d >= 0) & (i_d < D)
    c_mask = offs_c < C
    at = (x_ptr + batch * sxn + offs_c[:, None].to(tl.int64) * sxc
          + (i_d.to(tl.int64) * sxd + i_h.to(tl.int64) * sxh + i_w.to(tl.int64) * sxw)[None, :])
    tile = tl.load(at, mask=c_mask[:, None] & inside[None, :], other=0.0)
    to = y_ptr + (batch * (DP * HP * WP) + offs_s[None, :]) * C + offs_c[:, None]
    mask = c_mask[:, None] & s_mask[None, :]
    _store_copy(to, tile, mask, SPLIT, lo)

"""The Triton kernels of the seeds' convolution: what inductor leaves to cuDNN (``extern_kernels.convolution``).

Inductor compiles most convolutions to a call into cuDNN, which is no Triton to start a search
from.  A seed replaces each such call with ``_convolution`` (``evaluator/conv_launch.py``), which
launches the kernels below: an implicit GEMM written once for every variant ``aten.convolution``
has: 1 to 3 spatial dimensions, stride, padding, dilation, groups (depthwise included),
transposed with output padding.  Nothing is unfolded in
memory: each program gathers its tile straight from the input (or its channels-last copy).

- Rows of the GEMM are output positions (batch and spatial), columns the output channels of one
  group, the reduction runs over the group's input channels times the taps; grid axis 2 is the group.
- A transposed convolution gathers too: output ``y`` and tap ``k`` read input ``(y + padding -
  k * dilation) / stride`` where that division is exact, zero elsewhere (no scatter, no atomics).
- From 16 input channels a group, a second kernel runs the reduction over (tap, block of
  channels), a tap's input positions worked out per row of the tile.  Transposed with a stride,
  whether the division is exact depends on ``y`` modulo the stride alone (its phase): each
  program takes one phase's rows and visits only the taps it admits, about one in ``stride ** dims``.
- A warp's lanes run along consecutive input addresses (output positions), not across channels
  ``H * W`` apart.  Where it cannot tell which dimension of a gathered tile runs along consecutive
  addresses, Triton lays lanes along the first (3.6 and before) or the last (3.7 and after): the
  launch says which (``ROWS_FIRST``).  With fp32 products exact on an H200 (Triton 3.6), gathers
  laid along the positions ran 1.1-1.7x faster than those laid along the channels before, on 11
  of the sample's 18 convolutions, none slower by more than 2% (``kernelbench_search.md``,
  section 24).  The second kernel reads the weight packed with output channels innermost.  Or
  (``channels_last``) it gathers from a channels-last copy of the input, a tap's rows as whole
  vectors of channels, the weight packed with input channels innermost: with the seeds' tile in
  TF32 on an H200, 2.3 to 3.3x faster on the four 2-D convolutions with many channels of the
  KernelBench sample, the copy included
  (``experiments/kernelbench_search.md``, section 16).
- The general and direct kernels add a position's offset to a tap's, each worked out once, and
  check bounds only where a tap can leave the input (transposed with a stride: per element); on an
  H100 the general one ran 1.09-1.42x faster for it (``kernelbench_search.md``, section 19).
- Stride, padding and dilation are compile-time constants: a transposed convolution's division
  and remainder by the stride become shifts, or vanish for a stride of one.
- fp32 products are exact (``input_precision="ieee"``), as the strict references run.  Or
  (``split``) three TF32 products of operands split into a TF32 part and the
  rest as they are copied (the weight's packing, the input's copy): nearly fp32's accuracy, as
  ``tf32x3`` gives, without splitting both operands in registers at every step; on an H100, 1.3-1.5x
  faster than ``tf32x3`` on 9 of the 11 taps-loop convolutions of the KernelBench sample
  (``experiments/kernelbench_search.md``, section 20).
- One output channel a group (depthwise) gives the tensor cores nothing to multiply: a direct
  kernel sums the taps of ``block_m`` output positions of one channel a program.

Where a tile's rows and taps read the input and where the tile goes (positions, tap steps,
bounds, the store and its epilogue) is ``evaluator/conv_geometry.py``; the host side,
``_convolution`` (which kernel, the weight packed, the launch), is ``evaluator/conv_launch.py``.
A seed carries the three modules' text below their ``# --- seed ---`` lines, geometry, kernels,
launch, as one library (``evaluator.conv_library``).
"""
from __future__ import annotations

import triton
import triton.language as tl

from evaluator.conv_geometry import (_admitted, _digits, _epilogue, _input_rows, _store_tile, _tap_inside, _tap_rows,
                                      _tap_steps)

# --- seed ---


@triton.jit
def _conv_kernel(x_ptr, w_ptr, b_ptr, out_ptr, ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr,
                 C_in, D_in, H_in, W_in, D_out, H_out, W_out, M_total, C_group, O_group, K_total,
                 sxn, sxc, sxd, sxh, sxw, sw0, sw1, swd, swh, sww, son, soo, sod, soh, sow,
                 stride_d: tl.constexpr, stride_h: tl.constexpr, stride_w: tl.constexpr,
                 pad_d: tl.constexpr, pad_h: tl.constexpr, pad_w: tl.constexpr,
                 dil_d: tl.constexpr, dil_h: tl.constexpr, dil_w: tl.constexpr,
                 KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, TRANSPOSED: tl.constexpr,
                 HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 PHASED: tl.constexpr, CHECK_D: tl.constexpr, CHECK_H: tl.constexpr, CHECK_W: tl.constexpr,
                 OFFSETS_32: tl.constexpr, SPLIT: tl.constexpr = False, x_lo=0, w_lo=0,
                 ROWS_FIRST: tl.constexpr = True, C_PAD: tl.constexpr = 0):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    group = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M_total
    n_mask = offs_n < O_group
    # output position m = ((n * D_out + od) * H_out + oh) * W_out + ow
    ow, oh, od, batch = _digits(offs_m, W_out, H_out, D_out)
    x_group = x_ptr + (group * C_group).to(tl.int64) * sxc
    # Unless transposed with a stride, a gathered element's input offset is its row's part (output
    # position) plus its column's (channel and tap), each worked out once a tile row or reduction
    # index, not once an element; bounds are checked only along the dimensions where a tap can
    # leave the input (CHECK_*: padded, or transposed), in int32 where the input allows (OFFSETS_32).
    row_d, row_h, row_w = _input_rows(od, oh, ow, stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, TRANSPOSED)
    if OFFSETS_32:
        rows = batch * sxn + row_d * sxd + row_h * sxh + row_w * sxw
    else:
        rows = (batch.to(tl.int64) * sxn + row_d.to(tl.int64) * sxd + row_h.to(tl.int64) * sxh
                + row_w.to(tl.int64) * sxw)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # C_PAD (a power of two, at most BLOCK_K): the reduction runs taps outermost, each tap's channels
    # padded to C_PAD, BLOCK_K // C_PAD taps a step.  A column's channel and its tap's place among
    # the step's are then constants of the column (a warp's lanes run along the rows, each thread
    # holding every column), and only those few taps are split into kd, kh, kw, not each column's
    # index as below: on an H200, l2_7's convolution ran 1.28x faster for it and l2_67's 1.10x at
    # their seed tiles (kernelbench_search.md, section 24).  Else channels outermost, one index
    # split per column.
    TAPS: tl.constexpr = KD * KH * KW
    if C_PAD > 0:
        steps = tl.cdiv(TAPS, BLOCK_K // C_PAD)
    else:
        steps = tl.cdiv(K_total, BLOCK_K)
    for step in range(0, steps):
        if C_PAD > 0:  # tap = (kd * KH + kh) * KW + kw
            tap = step * (BLOCK_K // C_PAD) + tl.arange(0, BLOCK_K) // C_PAD
            channel = tl.arange(0, BLOCK_K) % C_PAD
            k_mask = (tap < TAPS) & (channel < C_group)
            kw = tap % KW
            rest_k = tap // KW
            kh = rest_k % KH
            kd = rest_k // KH
        else:  # k = ((c * KD + kd) * KH + kh) * KW + kw (sass_loops.py: fewer instructions than k % TAPS first)
            offs_k = step * BLOCK_K + tl.arange(0, BLOCK_K)
            k_mask = offs_k < K_total
            kw, kh, kd, channel = _digits(offs_k, KW, KH, KD)
        w_cols = channel * (sw0 if TRANSPOSED else sw1) + kd * swd + kh * swh + kw * sww
        # The gathers are (output position, reduction index) tiles, their lanes along the output
        # positions (the input's consecutive addresses: _gather), not the reduction's channels
        # H * W apart.
        if PHASED:  # transposed with a stride: whether tap k applies depends on the output's phase
            td = od[:, None] + pad_d - kd[None, :] * dil_d
            th = oh[:, None] + pad_h - kh[None, :] * dil_h
            tw = ow[:, None] + pad_w - kw[None, :] * dil_w
            valid = (td >= 0) & (th >= 0) & (tw >= 0)
            valid = valid & (td % stride_d == 0) & (th % stride_h == 0) & (tw % stride_w == 0)
            i_d = td // stride_d
            i_h = th // stride_h
            i_w = tw // stride_w
            valid = valid & (i_d < D_in) & (i_h < H_in) & (i_w < W_in)
            x_offsets = (channel[None, :].to(tl.int64) * sxc + batch[:, None].to(tl.int64) * sxn
                         + i_d.to(tl.int64) * sxd + i_h.to(tl.int64) * sxh + i_w.to(tl.int64) * sxw)
            valid = valid & m_mask[:, None] & k_mask[None, :]
        else:
            tap_d, tap_h, tap_w = _tap_steps(kd, kh, kw, dil_d, dil_h, dil_w, TRANSPOSED)
            if OFFSETS_32:
                cols = channel * sxc + tap_d * sxd + tap_h * sxh + tap_w * sxw
            else:
                cols = (channel.to(tl.int64) * sxc + tap_d.to(tl.int64) * sxd + tap_h.to(tl.int64) * sxh
                        + tap_w.to(tl.int64) * sxw)
            x_offsets = rows[:, None] + cols[None, :]
            valid = _tap_inside(m_mask[:, None] & k_mask[None, :], row_d[:, None], row_h[:, None], row_w[:, None],
                                tap_d[None, :], tap_h[None, :], tap_w[None, :], D_in, H_in, W_in,
                                CHECK_D, CHECK_H, CHECK_W)
        a = _gather(x_group + x_offsets, valid, ROWS_FIRST)
        if TRANSPOSED:  # weight (C_in, O / groups, *kernel)
            w_offsets = (group * C_group * sw0 + offs_n * sw1)[:, None] + w_cols[None, :]
        else:  # weight (O, C_in / groups, *kernel)
            w_offsets = ((group * O_group + offs_n) * sw0)[:, None] + w_cols[None, :]
        w_mask = n_mask[:, None] & k_mask[None, :]
        b = tl.trans(tl.load(w_ptr + w_offsets, mask=w_mask, other=0.0))
        if SPLIT:  # both operands split in memory, their second parts x_lo and w_lo elements on
            a_small = _gather(x_group + x_lo + x_offsets, valid, ROWS_FIRST)
            b_small = tl.trans(tl.load(w_ptr + w_lo + w_offsets, mask=w_mask, other=0.0))
            acc = _split_product(acc, a, a_small, b, b_small)
        elif IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    _store_tile(acc, out_ptr, b_ptr, batch.to(tl.int64), group * O_group + offs_n, od, oh, ow, son, soo, sod, soh,
                sow, m_mask, n_mask, ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr, HAS_BIAS)


@triton.jit
def _split_product(acc, a, a_small, b, b_small):
    # Three TF32 products of operands split in memory (a value's TF32 part, then the rest: see
    # conv_launch's _tf32_parts), small ones first: nearly fp32's accuracy (the 3xTF32 of CUTLASS)
    # with each operand fed to the tensor cores as it is loaded, where input_precision="tf32x3"
    # splits both in registers every step.
    acc = tl.dot(a_small, b, acc)
    acc = tl.dot(a, b_small, acc)
    return tl.dot(a, b, acc)


@triton.jit
def _gather(at, mask, ROWS_FIRST: tl.constexpr):
    # A (rows, columns) tile gathered from addresses that run along the rows (output positions)
    # where Triton cannot tell so: it lays a warp's lanes along the dimension with the longest
    # provable run of consecutive addresses, and on a tie along the first (Triton 3.6 and before:
    # ROWS_FIRST) or the last (3.7 and after, where the tile is loaded turned).
    if ROWS_FIRST:
        return tl.load(at, mask=mask, other=0.0)
    else:
        return tl.trans(tl.load(tl.trans(at), mask=tl.trans(mask), other=0.0))


@triton.jit
def _tap_operands(a_at, a_mask, b_at, b_mask, CHANNELS_LAST: tl.constexpr, ROWS_FIRST: tl.constexpr):
    # A tap's gathered input block (positions, channels) and its weights, loaded as laid out and
    # turned for the product.
    if CHANNELS_LAST:
        return tl.load(a_at, mask=a_mask, other=0.0), tl.trans(tl.load(b_at, mask=b_mask, other=0.0))
    else:
        return _gather(a_at, a_mask, ROWS_FIRST), tl.load(b_at, mask=b_mask, other=0.0)


@triton.jit
def _channel_product(acc, x_rows, rows, w_tap, channel, C_group, O_group, n_mask, sxc, x_lo, w_lo,
                     IEEE: tl.constexpr, CHANNELS_LAST: tl.constexpr, SPLIT: tl.constexpr, ROWS_FIRST: tl.constexpr):
    # One tap's block of input channels times its weights, added to the tile.  The gather's lanes
    # run along consecutive input addresses: the rows (output positions) in NCHW (_gather), the
    # channels in channels-last (the input's channel stride is 1: each row's channels load as whole
    # vectors, and the weight comes packed with its channels innermost too: both operands K-major,
    # as TF32 tensor cores read them).
    c_mask = channel < C_group
    a_at = x_rows[:, None] + channel[None, :].to(tl.int64) * sxc
    a_mask = rows[:, None] & c_mask[None, :]
    if CHANNELS_LAST:
        b_at = w_tap + channel[None, :]
        b_mask = n_mask[:, None] & c_mask[None, :]
    else:
        b_at = w_tap + channel[:, None] * O_group
        b_mask = c_mask[:, None] & n_mask[None, :]
    a, b = _tap_operands(a_at, a_mask, b_at, b_mask, CHANNELS_LAST, ROWS_FIRST)
    if SPLIT:  # both operands split in memory, their second parts x_lo and w_lo elements on
        a_small, b_small = _tap_operands(a_at + x_lo, a_mask, b_at + w_lo, b_mask, CHANNELS_LAST, ROWS_FIRST)
        return _split_product(acc, a, a_small, b, b_small)
    elif IEEE:
        return acc + tl.dot(a, b, input_precision="ieee")
    else:
        return acc + tl.dot(a, b)


@triton.jit
def _conv_taps_kernel(x_ptr, w_ptr, b_ptr, out_ptr, ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr,
                      D_in, H_in, W_in, D_out, H_out, W_out, QD, QH, QW, M_phase, C_group, O_group,
                      sxn, sxc, sxd, sxh, sxw, son, soo, sod, soh, sow,
                      stride_d: tl.constexpr, stride_h: tl.constexpr, stride_w: tl.constexpr,
                      pad_d: tl.constexpr, pad_h: tl.constexpr, pad_w: tl.constexpr,
                      dil_d: tl.constexpr, dil_h: tl.constexpr, dil_w: tl.constexpr,
                      KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, TRANSPOSED: tl.constexpr,
                      HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      TAP_STEP_D: tl.constexpr, TAP_STEP_H: tl.constexpr, TAP_STEP_W: tl.constexpr,
                      CHANNELS_LAST: tl.constexpr, SPLIT: tl.constexpr = False, x_lo=0, w_lo=0,
                      ROWS_FIRST: tl.constexpr = True):
    # The reduction runs over taps, then a tap's channels: a tap's input positions are worked out
    # per row of the tile, not per element of each gather.
    # Transposed, output y takes tap k only where the stride divides y + padding - k * dilation,
    # which depends on y modulo the stride alone (its phase): each program takes rows of one phase,
    # so a tap is kept or skipped for the whole tile and only the taps the phase admits are visited
    # (about one in stride^dims).  The phases of one block of rows run side by side: together they
    # write every output element of the region, so L2 holds whole sectors when it writes them back.
    # Not transposed, there is one phase: rows are output positions.
    PHASES: tl.constexpr = stride_d * stride_h * stride_w if TRANSPOSED else 1
    phase = tl.program_id(0) % PHASES
    pid_m = tl.program_id(0) // PHASES
    pid_n = tl.program_id(1)
    group = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_c = tl.arange(0, BLOCK_K)
    n_mask = offs_n < O_group
    # row m of the phase = ((n * QD + qd) * QH + qh) * QW + qw
    qw, qh, qd, batch = _digits(offs_m, QW, QH, QD)
    batch = batch.to(tl.int64)
    if TRANSPOSED:  # output (r_d + qd * stride_d, ...)
        r_w = phase % stride_w
        r_h = (phase // stride_w) % stride_h
        r_d = phase // (stride_w * stride_h)
        od = r_d + qd * stride_d
        oh = r_h + qh * stride_h
        ow = r_w + qw * stride_w
    else:
        r_d, r_h, r_w = 0, 0, 0
        od, oh, ow = qd, qh, qw
    m_mask = (offs_m < M_phase) & (od < D_out) & (oh < H_out) & (ow < W_out)
    x_base = x_ptr + batch * sxn + (group * C_group).to(tl.int64) * sxc
    # Transposed: y + padding - k * dilation, shifted by a multiple of the stride so that it is never
    # negative (the remainder and quotient of a negative number differ between C and Python).
    shift_d: tl.constexpr = stride_d * ((KD - 1) * dil_d // stride_d + 1)
    shift_h: tl.constexpr = stride_h * ((KH - 1) * dil_h // stride_h + 1)
    shift_w: tl.constexpr = stride_w * ((KW - 1) * dil_w // stride_w + 1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # the weight comes packed as (group, tap, channel, output channel), output channels contiguous, or
    # channels-last as (group, tap, output channel, channel)
    w_group = w_ptr + group * (KD * KH * KW) * C_group * O_group + (
        offs_n[:, None] * C_group if CHANNELS_LAST else offs_n[None, :])
    geometry = (qd, qh, qw, r_d, r_h, r_w, m_mask, x_base, w_group, C_group, O_group, D_in, H_in, W_in,
                sxd, sxh, sxw)
    # One loop over (admitted tap, channel block), which Triton pipelines across taps (a tap's
    # channels are one or two blocks where a group has 32 or 64): per dimension, the first tap the
    # phase admits and how many, TAP_STEP apart.
    first_d, count_d = _admitted(r_d, pad_d, dil_d, stride_d, shift_d, KD, TAP_STEP_D, TRANSPOSED)
    first_h, count_h = _admitted(r_h, pad_h, dil_h, stride_h, shift_h, KH, TAP_STEP_H, TRANSPOSED)
    first_w, count_w = _admitted(r_w, pad_w, dil_w, stride_w, shift_w, KW, TAP_STEP_W, TRANSPOSED)
    blocks = tl.cdiv(C_group, BLOCK_K)
    for step in range(count_d * count_h * count_w * blocks):
        t = step // blocks
        kw = first_w + (t % count_w) * TAP_STEP_W
        kh = first_h + (t // count_w % count_h) * TAP_STEP_H
        kd = first_d + (t // (count_w * count_h)) * TAP_STEP_D
        rows, x_rows, w_tap = _tap_rows(*geometry, kd, kh, kw, stride_d, stride_h, stride_w, pad_d, pad_h, pad_w,
                                        dil_d, dil_h, dil_w, shift_d, shift_h, shift_w, KH, KW, TRANSPOSED)
        acc = _channel_product(acc, x_rows, rows, w_tap, (step % blocks) * BLOCK_K + offs_c, C_group, O_group,
                               n_mask, sxc, x_lo, w_lo, IEEE, CHANNELS_LAST, SPLIT, ROWS_FIRST)
    _store_tile(acc, out_ptr, b_ptr, batch, group * O_group + offs_n, od, oh, ow, son, soo, sod, soh, sow,
                m_mask, n_mask, ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr, HAS_BIAS)


@triton.jit
def _conv_direct_kernel(x_ptr, w_ptr, b_ptr, out_ptr, ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr,
                        D_in, H_in, W_in, D_out, H_out, W_out, M_total, C_group,
                        sxn, sxc, sxd, sxh, sxw, sw0, sw1, swd, swh, sww, son, soo, sod, soh, sow,
                        stride_d: tl.constexpr, stride_h: tl.constexpr, stride_w: tl.constexpr,
                        pad_d: tl.constexpr, pad_h: tl.constexpr, pad_w: tl.constexpr,
                        dil_d: tl.constexpr, dil_h: tl.constexpr, dil_w: tl.constexpr,
                        KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, TRANSPOSED: tl.constexpr,
                        HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                        PHASED: tl.constexpr, CHECK_D: tl.constexpr, CHECK_H: tl.constexpr, CHECK_W: tl.constexpr):
    # One output channel per group (depthwise): no product to give the tensor cores, so each
    # program sums its output positions' taps directly, the input read along its rows.  As in the
    # general kernel, unless transposed with a stride, each output position's input address is
    # worked out once and a tap adds a constant to it; bounds are checked only where a tap can leave
    # the input (CHECK_*).
    pid_m = tl.program_id(0)
    group = tl.program_id(2)  # the output channel
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < M_total
    ow, oh, od, batch = _digits(offs_m, W_out, H_out, D_out)
    batch = batch.to(tl.int64)
    x_base = x_ptr + batch * sxn + (group * C_group).to(tl.int64) * sxc
    row_d, row_h, row_w = _input_rows(od, oh, ow, stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, TRANSPOSED)
    x_rows = x_base + (row_d.to(tl.int64) * sxd + row_h.to(tl.int64) * sxh + row_w.to(tl.int64) * sxw)
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for c in range(C_group):
        for kd in tl.static_range(KD):
            for kh in tl.static_range(KH):
                for kw in tl.static_range(KW):
                    if TRANSPOSED:
                        w_offset = (group * C_group + c) * sw0 + kd * swd + kh * swh + kw * sww
                    else:
                        w_offset = group * sw0 + c * sw1 + kd * swd + kh * swh + kw * sww
                    if PHASED:  # transposed with a stride: whether the tap applies depends on the phase
                        td = od + pad_d - kd * dil_d
                        th = oh + pad_h - kh * dil_h
                        tw = ow + pad_w - kw * dil_w
                        valid = (td >= 0) & (th >= 0) & (tw >= 0)
                        valid = valid & (td % stride_d == 0) & (th % stride_h == 0) & (tw % stride_w == 0)
                        i_d = td // stride_d
                        i_h = th // stride_h
                        i_w = tw // stride_w
                        valid = valid & (i_d < D_in) & (i_h < H_in) & (i_w < W_in) & m_mask
                        x_offsets = (c * sxc + i_d.to(tl.int64) * sxd + i_h.to(tl.int64) * sxh
                                     + i_w.to(tl.int64) * sxw)
                        x = tl.load(x_base + x_offsets, mask=valid, other=0.0)
                    else:
                        tap_d, tap_h, tap_w = _tap_steps(kd, kh, kw, dil_d, dil_h, dil_w, TRANSPOSED)
                        valid = _tap_inside(m_mask, row_d, row_h, row_w, tap_d, tap_h, tap_w, D_in, H_in, W_in,
                                            CHECK_D, CHECK_H, CHECK_W)
                        tap = c * sxc + tap_d * sxd + tap_h * sxh + tap_w * sxw  # a tap: one number, not one an element
                        x = tl.load(x_rows + tap, mask=valid, other=0.0)
                    acc += x.to(tl.float32) * tl.load(w_ptr + w_offset).to(tl.float32)
    if HAS_BIAS:
        acc += tl.load(b_ptr + group).to(tl.float32)
    out_offsets = (batch * son + group.to(tl.int64) * soo + od.to(tl.int64) * sod + oh.to(tl.int64) * soh
                   + ow.to(tl.int64) * sow)
    _epilogue(acc, out_ptr, out_offsets, m_mask, ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr, group, True)

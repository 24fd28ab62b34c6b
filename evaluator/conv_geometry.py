"""Where the seeds' convolution kernels (``evaluator/conv_kernel.py``) read and write: per output
position and tap, the input position and its offset, whether the tap stays inside the input, and
the tile's store through ``_epilogue`` (which operator ``fuse_epilogue`` replaces).  Shared by the
general, taps-loop and direct kernels; a seed carries this text first (``evaluator.conv_library``).
"""
from __future__ import annotations

import triton
import triton.language as tl

# --- seed ---


@triton.jit
def _epilogue(acc, out_ptr, offsets, mask, ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr, cols, col_mask):
    # The output tile stored at its offsets into the output.  Operator fuse_epilogue replaces this
    # body with a pointwise kernel that read the output after the convolution, the ep*_ptr operands
    # its other tensors (operators/fuse_epilogue.py); cols, the tile's output channels (a row
    # vector, or the direct kernel's one channel) and col_mask theirs: a channel's parameters are
    # loaded once a column, not gathered once an element.
    tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _store_tile(acc, out_ptr, b_ptr, batch, channels, od, oh, ow, son, soo, sod, soh, sow, m_mask, n_mask,
                ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr, HAS_BIAS: tl.constexpr):
    # A tile of output positions (rows) by output channels (columns), the bias added.
    if HAS_BIAS:
        acc += tl.load(b_ptr + channels, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    out_offsets = (batch[:, None] * son + channels[None, :].to(tl.int64) * soo + od[:, None].to(tl.int64) * sod
                   + oh[:, None].to(tl.int64) * soh + ow[:, None].to(tl.int64) * sow)
    _epilogue(acc, out_ptr, out_offsets, m_mask[:, None] & n_mask[None, :],
              ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr, channels[None, :], n_mask[None, :])


@triton.jit
def _digits(index, A, B, C):
    # index = ((rest * C + c) * B + b) * A + a: its digits a, b, c and the rest, as an output
    # position splits into width, height, depth and batch, or a reduction index into taps and channel
    a = index % A
    rest = index // A
    b = rest % B
    rest = rest // B
    return a, b, rest % C, rest // C


@triton.jit
def _input_rows(od, oh, ow, stride_d: tl.constexpr, stride_h: tl.constexpr, stride_w: tl.constexpr,
                pad_d: tl.constexpr, pad_h: tl.constexpr, pad_w: tl.constexpr, TRANSPOSED: tl.constexpr):
    # Per dimension, the input position that a tap's offset is added to: output y takes tap k from
    # input y * stride - padding + k * dilation, or transposed (at stride 1) y + padding - k * dilation.
    if TRANSPOSED:
        row_d = od + pad_d
        row_h = oh + pad_h
        row_w = ow + pad_w
    else:
        row_d = od * stride_d - pad_d
        row_h = oh * stride_h - pad_h
        row_w = ow * stride_w - pad_w
    return row_d, row_h, row_w


@triton.jit
def _tap_steps(kd, kh, kw, dil_d: tl.constexpr, dil_h: tl.constexpr, dil_w: tl.constexpr, TRANSPOSED: tl.constexpr):
    # Per dimension, what tap k adds to _input_rows' position: k * dilation, or transposed -k * dilation.
    if TRANSPOSED:
        tap_d = -kd * dil_d
        tap_h = -kh * dil_h
        tap_w = -kw * dil_w
    else:
        tap_d = kd * dil_d
        tap_h = kh * dil_h
        tap_w = kw * dil_w
    return tap_d, tap_h, tap_w


@triton.jit
def _tap_inside(valid, row_d, row_h, row_w, tap_d, tap_h, tap_w, D_in, H_in, W_in,
                CHECK_D: tl.constexpr, CHECK_H: tl.constexpr, CHECK_W: tl.constexpr):
    # valid, and the tap inside the input along each dimension where it can leave it (CHECK_*)
    if CHECK_D:
        valid = valid & (row_d + tap_d >= 0) & (row_d + tap_d < D_in)
    if CHECK_H:
        valid = valid & (row_h + tap_h >= 0) & (row_h + tap_h < H_in)
    if CHECK_W:
        valid = valid & (row_w + tap_w >= 0) & (row_w + tap_w < W_in)
    return valid


@triton.jit
def _admitted(r, pad, dil, stride, shift, K, STEP: tl.constexpr, TRANSPOSED: tl.constexpr):
    # Along one dimension, the first tap a transposed convolution's phase r admits and how many it
    # admits: they are STEP = stride / gcd(stride, dilation) apart.  Not transposed: all K from 0.
    if TRANSPOSED:
        first = K
        for j in tl.static_range(STEP):
            first = tl.where((first == K) & ((r + pad - j * dil + shift) % stride == 0), j, first)
        return first, tl.where(first < K, (K - 1 - first) // STEP + 1, 0)
    else:
        return 0, K


@triton.jit
def _tap_rows(qd, qh, qw, r_d, r_h, r_w, m_mask, x_base, w_group, C_group, O_group, D_in, H_in, W_in,
              sxd, sxh, sxw, kd, kh, kw,
              stride_d: tl.constexpr, stride_h: tl.constexpr, stride_w: tl.constexpr,
              pad_d: tl.constexpr, pad_h: tl.constexpr, pad_w: tl.constexpr,
              dil_d: tl.constexpr, dil_h: tl.constexpr, dil_w: tl.constexpr,
              shift_d: tl.constexpr, shift_h: tl.constexpr, shift_w: tl.constexpr,
              KH: tl.constexpr, KW: tl.constexpr, TRANSPOSED: tl.constexpr):
    # A tap's input row of each output position of the tile, whether it is inside the input, and
    # the tap's weights for the tile's output channels (packed: see the kernel).
    if TRANSPOSED:
        i_d = qd + ((r_d + pad_d - kd * dil_d + shift_d) // stride_d - shift_d // stride_d)
        i_h = qh + ((r_h + pad_h - kh * dil_h + shift_h) // stride_h - shift_h // stride_h)
        i_w = qw + ((r_w + pad_w - kw * dil_w + shift_w) // stride_w - shift_w // stride_w)
    else:
        i_d = qd * stride_d + (kd * dil_d - pad_d)
        i_h = qh * stride_h + (kh * dil_h - pad_h)
        i_w = qw * stride_w + (kw * dil_w - pad_w)
    w_tap = w_group + ((kd * KH + kh) * KW + kw) * C_group * O_group
    rows = m_mask & (i_d >= 0) & (i_h >= 0) & (i_w >= 0) & (i_d < D_in) & (i_h < H_in) & (i_w < W_in)
    x_rows = x_base + i_d.to(tl.int64) * sxd + i_h.to(tl.int64) * sxh + i_w.to(tl.int64) * sxw
    return rows, x_rows, w_tap

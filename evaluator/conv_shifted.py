"""The seeds' convolution at stride 1 as a GEMM whose input tiles are whole boxes: shifted windows
over a zero-padded channels-last copy, loaded by the tensor memory accelerator (TMA, sm_90 on).

At stride 1 (a convolution, or a transposed one) output position ``y`` reads input ``y + k * d -
p`` at tap ``k`` (transposed: ``y + p - k * d``).  Copy the input channels-last into a buffer
padded so that every tap's position is inside it: along each dimension ``out + d * (K - 1)``
positions, the input placed ``p`` in (transposed ``d * (K - 1) - p``).  Index the GEMM's rows by
the buffer's own positions, flattened: a tap then moves every row of a tile by one constant
(``(kd * d_d * HP + kh * d_h) * WP + kw * d_w`` rows; transposed, ``K - 1 - k`` for ``k``), so a
tap's block of channels is one rectangular box of the (positions, channels) buffer, which TMA
loads straight into shared memory for the tensor cores: no address is worked out per element,
no mask.  Rows that are no output position (the buffer's border) are computed and dropped at
the store: about ``d * (K - 1) / out`` of them a dimension (1.6% on a 256-wide output, 3x3).
A transposed convolution with a stride ``s`` runs as ``s`` phases a dimension: outputs ``s * q +
r`` take only the taps ``k`` for which ``r + p - k * d`` is a multiple of ``s`` (every ``s /
gcd(s, d)``-th from the first), reading input ``q + (r + p - k * d) / s``: a transposed
convolution at stride 1 over ``q``, of those taps, dilation ``d / gcd(s, d)`` and padding ``(r + p
- k0 * d) / s``, its outputs stored ``s`` apart; one launch, padded copy and packed weight a phase.
The taps kernel (``evaluator/conv_kernel.py``) gathers element by element instead; it remains
for the other strides, a phase no tap reaches, and where TMA is missing.

The weight comes packed as the taps kernel's channels-last one, (group, tap, output channel,
channel), one box a tap and block of channels.  Boxes past a tensor's end read zeros (TMA's
out-of-bounds fill); past a group's channels they read the next group's, so with groups a
group's channels must be a whole number of blocks (``evaluator/conv_launch.py`` checks).
"""
from __future__ import annotations

import triton
import triton.language as tl

from evaluator.conv_geometry import _store_tile
from evaluator.conv_kernel import _split_product

# --- seed ---


@triton.jit
def _conv_shifted_kernel(x_desc, w_desc, b_ptr, out_ptr, ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr,
                         DP, HP, WP, D_out, H_out, W_out, M_rows, C_group, O_group, son, soo, sod, soh, sow,
                         dil_d: tl.constexpr, dil_h: tl.constexpr, dil_w: tl.constexpr,
                         KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, TRANSPOSED: tl.constexpr,
                         HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         SPLIT: tl.constexpr = False, x_small_desc=None, w_small_desc=None,
                         PH_D=0, PH_H=0, PH_W=0, S_D: tl.constexpr = 1, S_H: tl.constexpr = 1,
                         S_W: tl.constexpr = 1):
    # Rows are the padded buffer's positions ((n * DP + d) * HP + h) * WP + w; a tap adds one
    # constant to every row (see the module).  The loop over (tap, block of channels) is one
    # sequence of box loads, which Triton pipelines.  Transposed with a stride S, one launch a phase:
    # its outputs S * q + PH (q under D_out, H_out, W_out, the phase's extents) and its taps alone.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    group = tl.program_id(2)
    row0 = pid_m * BLOCK_M
    col0 = pid_n * BLOCK_N
    TAPS: tl.constexpr = KD * KH * KW
    blocks = tl.cdiv(C_group, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(TAPS * blocks):
        tap = step // blocks
        channel = (step % blocks) * BLOCK_K
        kw = tap % KW
        kh = tap // KW % KH
        kd = tap // (KW * KH)
        if TRANSPOSED:  # output y reads the buffer at y + d * (K - 1 - k)
            kw = KW - 1 - kw
            kh = KH - 1 - kh
            kd = KD - 1 - kd
        shift = (kd * dil_d * HP + kh * dil_h) * WP + kw * dil_w
        a_at = [row0 + shift, group * C_group + channel]
        b_at = [(group * TAPS + tap) * O_group + col0, channel]
        a = x_desc.load(a_at)
        b = tl.trans(w_desc.load(b_at))
        if SPLIT:  # both operands split in memory: their TF32 parts here, the rest in the small copies
            acc = _split_product(acc, a, x_small_desc.load(a_at), b, tl.trans(w_small_desc.load(b_at)))
        elif IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    rows = row0 + tl.arange(0, BLOCK_M)
    ow = rows % WP
    oh = rows // WP % HP
    od = rows // (WP * HP) % DP
    batch = (rows // (WP * HP * DP)).to(tl.int64)
    m_mask = (rows < M_rows) & (ow < W_out) & (oh < H_out) & (od < D_out)
    offs_n = col0 + tl.arange(0, BLOCK_N)
    _store_tile(acc, out_ptr, b_ptr, batch, group * O_group + offs_n, od * S_D + PH_D, oh * S_H + PH_H,
                ow * S_W + PH_W, son, soo, sod, soh, sow, m_mask, offs_n < O_group,
                ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr, HAS_BIAS)

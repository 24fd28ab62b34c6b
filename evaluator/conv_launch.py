"""The host side of the seeds' convolution: ``_convolution``, ``aten.convolution`` in Triton.

It takes ``aten.convolution``'s arguments, works out the output's size and layout, and launches
one of ``evaluator/conv_kernel.py``'s kernels: the direct one for one output channel a group
(depthwise), the taps loop from 16 input channels a group (or where asked; its weight packed once
a call, and its input copied channels-last where asked, by ``evaluator/conv_copies.py``'s
kernels), else the general one.  A seed carries this module's text below ``# --- seed ---`` after the kernels'
(``evaluator.conv_library``), so the imports above the line are for this module run on its own
(tests, probes).
"""
from __future__ import annotations

import torch
import triton

from evaluator.conv_copies import _channels_last_kernel, _pack_kernel, _padded_copy_kernel, _split_kernel
from evaluator.conv_kernel import _conv_direct_kernel, _conv_kernel, _conv_taps_kernel
from evaluator.conv_shifted import _conv_shifted_kernel

# --- seed ---


def _channels_last(x, split=False):
    """``x`` with its channels innermost (same shape, channel stride 1), copied by a Triton kernel:
    the evaluator counts a candidate's device time outside its own kernels against it.  ``split``:
    a copy of ``x``'s TF32 parts (:func:`_tf32_parts`) instead, the second ``x.numel()`` elements
    after the first, which is returned."""
    if x.stride(1) == 1 or not x.is_contiguous() or x.shape[0] > 65535:
        y = x if x.stride(1) == 1 else x.movedim(1, -1).contiguous().movedim(-1, 1)
        return _split(y.movedim(1, -1).contiguous()).movedim(-1, 1) if split else y
    y = torch.empty((1 + split, x.shape[0], *x.shape[2:], x.shape[1]), dtype=x.dtype, device=x.device)
    channels, positions = x.shape[1], _count(x.shape[2:])
    # the grid from the launch's own tile: a search that moves BLOCK_C or BLOCK_S (tunables to it)
    # keeps every value written (a fixed grid left part of y unwritten: NaN, section 17)
    grid = lambda meta: (triton.cdiv(positions, meta["BLOCK_S"]), triton.cdiv(channels, meta["BLOCK_C"]),  # noqa: E731
                         x.shape[0])
    _channels_last_kernel[grid](x, y, channels, positions, BLOCK_C=32, BLOCK_S=64, SPLIT=split, lo=y[0].numel())
    return y[0].movedim(-1, 1)


def _split(t):
    """A contiguous ``t``'s TF32 parts (:func:`_tf32_parts`), the second ``t.numel()`` elements after
    the first, which is returned (shaped as ``t``)."""
    parts = torch.empty((2, *t.shape), dtype=t.dtype, device=t.device)
    grid = lambda meta: (triton.cdiv(t.numel(), meta["BLOCK"]),)  # noqa: E731 (BLOCK: a tunable, as the copy's)
    _split_kernel[grid](t, parts, t.numel(), BLOCK=1024)
    return parts[0]


def _layout(t):
    """A tensor's strides as the kernels take them: batch (or first), channel, depth, height, width."""
    return (t.stride(0), t.stride(1), *_spatial3(t.stride()[2:], 0))


def _spatial3(values, fill):
    """A per-spatial-dimension list (1 to 3 entries) as depth, height, width."""
    values = list(values)
    return [fill] * (3 - len(values)) + values


def _convolution(x, weight, bias=None, stride=(1,), padding=(0,), dilation=(1,), transposed=False,
                 output_padding=(0,), groups=1, *, out_size=None, out_stride=None, epilogue=(),
                 block_m=64, block_n=32, block_k=32, num_warps=4, num_stages=2, taps_loop=None,
                 channels_last=False, split=False, shifted=False):
    """``aten.convolution`` in Triton; the output gets ``out_size``/``out_stride`` where the
    compiled graph expects a particular layout, else it is contiguous.  ``taps_loop``: the taps
    kernel (True), the general one (False), or the taps kernel from 16 channels a group (None);
    ``channels_last``: the taps kernel gathers from a channels-last copy of the input; ``split``
    (fp32, the taps or the general kernel): three TF32 products of operands split as they are
    copied (the input's copy made channels-last where the taps kernel gathers so); ``epilogue``:
    up to six tensors, the ``ep*_ptr`` operands of ``_epilogue``; ``shifted``: where the taps
    loop gathers channels-last at stride 1 (or transposed with a stride: a launch a phase) and the GPU
    has TMA, shifted windows over a zero-padded channels-last copy instead
    (``evaluator/conv_shifted.py``).  With exact fp32 products the
    shifted kernel ran 3-60x slower than the gather on an H200 (``kernelbench_search.md``, section
    31): seeds switch it on in TF32, or with split operands."""
    dims = x.dim() - 2
    kernel = list(weight.shape[2:])
    stride, padding, dilation, output_padding = (
        [int(v) for v in (p if len(p) == dims else list(p) * dims)]
        for p in (stride, padding, dilation, output_padding))
    batch, c_in = x.shape[0], x.shape[1]
    if transposed:
        out_channels = weight.shape[1] * groups
        spatial = [(n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, s, p, d, k, op
                   in zip(x.shape[2:], stride, padding, dilation, kernel, output_padding)]
    else:
        out_channels = weight.shape[0]
        spatial = [(n + 2 * p - d * (k - 1) - 1) // s + 1 for n, s, p, d, k
                   in zip(x.shape[2:], stride, padding, dilation, kernel)]
    size = [batch, out_channels, *spatial]
    split = bool(split) and x.dtype == torch.float32  # three TF32 products stand for fp32 ones only
    if out_size is None:
        out = torch.empty(size, dtype=x.dtype, device=x.device)
    else:
        out = torch.empty_strided(tuple(out_size), tuple(out_stride), dtype=x.dtype, device=x.device)
    c_group, o_group = c_in // groups, out_channels // groups
    k_total = c_group * _count(kernel)
    m_total = batch * _count(spatial)
    if out.numel() == 0:
        return out
    # what the kernels take: the layouts, the convolution's parameters, its taps
    x_layout, w_layout, out_layout = _layout(x), _layout(weight), _layout(out)
    geometry = (*_spatial3(stride, 1), *_spatial3(padding, 0), *_spatial3(dilation, 1))
    layouts = (*x_layout, *w_layout, *out_layout, *geometry)
    kd, kh, kw = _spatial3(kernel, 1)
    shared = dict(KD=kd, KH=kh, KW=kw, TRANSPOSED=bool(transposed), HAS_BIAS=bias is not None,
                  BLOCK_M=block_m, num_warps=num_warps, num_stages=num_stages)
    sizes = (*_spatial3(x.shape[2:], 1), *_spatial3(spatial, 1), m_total, c_group)
    b_arg = bias if bias is not None else x
    operands = (*epilogue, *[out] * (6 - len(epilogue)))  # what _epilogue does not read: any tensor
    if o_group == 1:  # depthwise: each output channel its own sum of taps (block_m positions a program)
        _conv_direct_kernel[(triton.cdiv(m_total, block_m), 1, groups)](
            x, weight, b_arg, out, *operands, *sizes, *layouts, **shared,
            **_gather_checks(transposed, stride, padding))
        return out
    # 16 channels a group or more: taps outermost, a tap's channels innermost (and, transposed, only
    # the taps each output's phase admits: see the kernel).  Fewer leave most of a product's depth
    # empty: the general kernel then runs the taps and channels as one reduction, unless the caller
    # asks for the taps kernel (by Triton 3.6's SASS for sm_90 in TF32 channels-last, still 2.4-3.6x
    # fewer instructions with 8 or 3 channels: kernelbench_search.md section 16; not timed).
    if (c_group >= 16 and taps_loop is not False) or taps_loop:
        phases = _phases(stride, padding, dilation, kernel, spatial, transposed) if shifted else None
        if channels_last and phases and _shifts(x, c_group, groups, (block_m, block_n, block_k), phases):
            _shifted_convolution(x, weight, b_arg, out, operands, phases, stride, transposed, groups,
                                 block_m, block_n, block_k, num_warps, num_stages, split, bias is not None)
            return out
        strides = _spatial3(stride, 1) if transposed else [1, 1, 1]  # rows a phase, per dimension
        quotients = [-(-n // s) for n, s in zip(_spatial3(spatial, 1), strides)]
        m_phase = batch * _count(quotients)
        block_k = _channel_step(block_k, c_group)
        grid = (_count(strides) * triton.cdiv(m_phase, block_m), triton.cdiv(o_group, block_n), groups)
        steps = [s // _gcd(s, d) for s, d in zip(strides, _spatial3(dilation, 1))]  # admitted taps apart
        # The weight packed as (group, tap, channel, output channel), one copy a call: a tap's weights
        # are rows of consecutive output channels, where PyTorch's layout puts a sector per float
        # (suspected in the stride-1 loss: kernelbench_search.md, sections 9 and 11).  Channels-last,
        # the input is copied once with its channels innermost and the weight packed as (group, tap,
        # output channel, channel).
        packed = _packed_weight(weight, transposed, groups, c_group, o_group, channels_last, split)
        if split:  # each operand's TF32 parts, the second one copy's length after the first
            x = _channels_last(x, split=True) if channels_last else _split(x.contiguous())
            x_layout = _layout(x)
        elif channels_last:
            x = _channels_last(x)
            x_layout = _layout(x)
        _conv_taps_kernel[grid](x, packed, b_arg, out, *operands, *sizes[:6], *quotients, m_phase, c_group,
                                o_group, *x_layout, *out_layout, *geometry, IEEE=x.dtype == torch.float32,
                                CHANNELS_LAST=channels_last, SPLIT=split, x_lo=x.numel(), w_lo=packed.numel(),
                                BLOCK_N=block_n, BLOCK_K=block_k, ROWS_FIRST=_ROWS_FIRST,
                                TAP_STEP_D=steps[0], TAP_STEP_H=steps[1], TAP_STEP_W=steps[2],
                                **shared)
        return out
    grid = (triton.cdiv(m_total, block_m), triton.cdiv(o_group, block_n), groups)
    if split:  # each operand's TF32 parts, the second one copy's length after the first
        x, weight = _split(x.contiguous()), _split(weight.contiguous())
        layouts = (*_layout(x), *_layout(weight), *out_layout, *geometry)
    # every offset of a gather within int32, with room for a block of channels past the last
    span = sum((n - 1) * abs(s) for n, s in zip(x.shape, x.stride())) + (c_group + block_k) * abs(x.stride(1))
    checks = _gather_checks(transposed, stride, padding)
    # taps outermost, a tap's channels padded to a power of two, where a step holds whole taps (the
    # kernel's C_PAD); transposed with a stride, each element's phase decides (channels outermost)
    c_pad = triton.next_power_of_2(c_group)
    c_pad = c_pad if c_pad <= block_k and not checks["PHASED"] else 0
    _conv_kernel[grid](x, weight, b_arg, out, *operands, c_in, *sizes, o_group, k_total, *layouts,
                       IEEE=x.dtype == torch.float32, BLOCK_N=block_n, BLOCK_K=block_k,
                       OFFSETS_32=span < _INT32_SPAN, SPLIT=split, x_lo=x.numel(), w_lo=weight.numel(), **shared,
                       **checks, ROWS_FIRST=_ROWS_FIRST, C_PAD=c_pad)
    return out


def _phases(stride, padding, dilation, kernel, spatial, transposed) -> list[tuple] | None:
    """The shifted windows' launches, each a tuple over the spatial dimensions of (phase, first tap,
    taps apart, taps, dilation, padding, outputs): one launch at stride 1; transposed with a stride,
    one a phase (``evaluator/conv_shifted.py``).  None for a strided convolution not transposed, or
    where a phase with outputs has no tap (its outputs the bias alone: the taps kernel runs)."""
    per_dim = []
    for s, p, d, k, n in zip(stride, padding, dilation, kernel, spatial):
        if s == 1:
            per_dim.append([(0, 0, 1, k, d, p, n)])
            continue
        if not transposed:
            return None
        g = _gcd(s, d)
        step = s // g  # the taps a phase takes, this far apart
        phases = []
        for r in range(min(s, n)):
            first = next((j for j in range(min(k, step)) if (r + p - j * d) % s == 0), None)
            if first is None:
                return None
            phases.append((r, first, step, -(-(k - first) // step), d // g, (r + p - first * d) // s,
                           -(-(n - r) // s)))
        per_dim.append(phases)
    launches = [()]  # every phase of each dimension with every one of the others (a seed imports no itertools)
    for options in per_dim:
        launches = [done + (option,) for done in launches for option in options]
    return launches


def _shifts(x, c_group, groups, tile, phases) -> bool:
    """Whether the shifted-window kernel can run this convolution here (``phases``: its launches,
    from :func:`_phases`): TMA (sm_90 on, or Triton's interpreter on the CPU), boxes of at most 256 a
    side (``tile``: block_m, block_n, block_k), rows of the copy and of the packed weight 16-byte
    aligned, with groups, a group's channels whole blocks (a box past them would read the next
    group's), each copy's rows counted in int32 (TMA's coordinates), and few of them outside the
    outputs (``_SHIFTED_WASTE``)."""
    block_m, block_n, block_k = tile
    if max(block_m, block_n, block_k) > 256 or x.shape[0] > 65535:  # the copy's grid: a batch an index of axis 2
        return False
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return False
    for launch in phases:
        padded, outputs = _count(_padded_extent(launch)), _count(n for *_, n in launch)
        if x.shape[0] * padded >= _INT32_SPAN or padded > _SHIFTED_WASTE * outputs:
            return False
    if x.device.type == "cuda" and (torch.version.hip is not None or torch.cuda.get_device_capability(x.device)[0] < 9):
        return False  # TMA: NVIDIA's sm_90 on (ROCm reports its own gfx version here)
    if _tensor_descriptor() is None:
        return False
    aligned = 16 // x.element_size()
    return c_group % aligned == 0 and (groups == 1 or c_group % _channel_step(block_k, c_group) == 0)


def _padded_extent(launch) -> list[int]:
    """A launch's padded copy, positions along each dimension: its outputs', and its taps' reach past them."""
    return [outputs + dil * (taps - 1) for _, _, _, taps, dil, _, outputs in launch]


def _channel_step(block_k: int, c_group: int) -> int:
    """The channels a step of the taps loop (or the shifted windows) reduces: ``block_k``, at most
    the group's channels rounded up to a power of two, at least 16 (a dot's least depth)."""
    return max(16, min(block_k, triton.next_power_of_2(c_group)))


def _packed_weight(weight, transposed, groups, c_group, o_group, channels_last, split=False):
    """The weight packed, one copy a call by a Triton kernel (the evaluator counts a candidate's device
    time outside its own kernels against it: PyTorch's copy was a tenth of a small convolution's), as
    (group, tap, channel, output channel), or ``channels_last`` as (group, tap, output channel,
    channel): see the taps loop in ``_convolution``.  ``split``: its TF32 parts, the second one copy's
    length after the first, which is returned."""
    taps = _count(weight.shape[2:])
    by_input = weight.reshape(groups, c_group, o_group, taps) if transposed else \
        weight.reshape(groups, o_group, c_group, taps).transpose(1, 2)
    view = by_input.permute(0, 3, 2, 1) if channels_last else by_input.permute(0, 3, 1, 2)
    parts = torch.empty((1 + split, *view.shape), dtype=weight.dtype, device=weight.device)
    grid = lambda meta: (triton.cdiv(view.numel(), meta["BLOCK"]),)  # noqa: E731 (BLOCK: a tunable, as the copy's)
    _pack_kernel[grid](view, parts, view.numel(), *view.shape[1:], *view.stride(), BLOCK=1024, SPLIT=split)
    return parts[0]


def _tensor_descriptor():
    """Triton's host-side TMA descriptor class (Triton 3.4 on), or None where this Triton has none."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        return None
    return TensorDescriptor


def _shifted_convolution(x, weight, b_arg, out, operands, phases, stride, transposed, groups,
                         block_m, block_n, block_k, num_warps, num_stages, split, has_bias):
    """``out`` from shifted windows over a zero-padded channels-last copy of ``x``
    (``evaluator/conv_shifted.py``), one launch a phase (``phases``, from :func:`_phases`); split:
    each operand's TF32 parts, three products."""
    TensorDescriptor = _tensor_descriptor()
    batch, channels = x.shape[0], x.shape[1]
    c_group, o_group = channels // groups, out.shape[1] // groups
    block_k = _channel_step(block_k, c_group)
    s_d, s_h, s_w = _spatial3(stride, 1)
    for launch in phases:
        phase, first, apart, taps, dilation, padding, outputs = (list(v) for v in zip(*launch))
        # along each dimension the input placed `lead` in: the taps' reach before the first output
        # (transposed, less the padding), else the padding
        lead = [d * (k - 1) - p if transposed else p for d, k, p in zip(dilation, taps, padding)]
        padded = _padded_extent(launch)
        rows = batch * _count(padded)
        copies = torch.empty((1 + split, rows, channels), dtype=x.dtype, device=x.device)
        positions = _count(padded)
        grid = lambda meta: (triton.cdiv(positions, meta["BLOCK_S"]), triton.cdiv(channels, meta["BLOCK_C"]),  # noqa: E731
                             batch)
        _padded_copy_kernel[grid](x, copies, channels, *_spatial3(x.shape[2:], 1), *_spatial3(padded, 1),
                                  *_spatial3(lead, 0), *_layout(x), BLOCK_C=32, BLOCK_S=64, SPLIT=split,
                                  lo=copies[0].numel())
        # the phase's taps alone (all of them at stride 1)
        sub = weight[(slice(None), slice(None), *(slice(f, None, a) for f, a in zip(first, apart)))]
        packed = _packed_weight(sub, transposed, groups, c_group, o_group, True, split).reshape(-1, c_group)
        if split:  # the TF32 parts, then the rest one copy's length on
            big = packed
            packed = [big, big.as_strided(big.shape, big.stride(), big.storage_offset() + big.numel())]
        else:
            packed = [packed]
        x_descs = [TensorDescriptor.from_tensor(copy, [block_m, block_k]) for copy in copies]
        w_descs = [TensorDescriptor.from_tensor(part, [block_n, block_k]) for part in packed]
        kd, kh, kw = _spatial3(taps, 1)
        ph_d, ph_h, ph_w = _spatial3(phase, 0)
        _conv_shifted_kernel[(triton.cdiv(rows, block_m), triton.cdiv(o_group, block_n), groups)](
            x_descs[0], w_descs[0], b_arg, out, *operands, *_spatial3(padded, 1), *_spatial3(outputs, 1), rows,
            c_group, o_group, *_layout(out), *_spatial3(dilation, 1), KD=kd, KH=kh, KW=kw,
            TRANSPOSED=bool(transposed), HAS_BIAS=has_bias, IEEE=x.dtype == torch.float32, BLOCK_M=block_m,
            BLOCK_N=block_n, BLOCK_K=block_k, SPLIT=split, x_small_desc=x_descs[-1], w_small_desc=w_descs[-1],
            PH_D=ph_d, PH_H=ph_h, PH_W=ph_w, S_D=s_d, S_H=s_h, S_W=s_w, num_warps=num_warps,
            num_stages=num_stages)


def _gather_checks(transposed, stride, padding) -> dict:
    """How the general and direct kernels find a tap's input: per element where transposed with a
    stride (PHASED), else a row's address plus a tap's, bounds checked only along dimensions where a
    tap can leave the input (padded, or transposed: at stride 1, y + padding - k * dilation)."""
    checks = [bool(transposed) or p > 0 for p in _spatial3(padding, 0)]
    return dict(PHASED=bool(transposed) and any(s > 1 for s in stride),
                CHECK_D=checks[0], CHECK_H=checks[1], CHECK_W=checks[2])


# the largest span of input offsets the general kernel gathers in int32
_INT32_SPAN = 2 ** 30

# Shifted windows compute every row of the padded copy, outputs or not: beyond this many rows an
# output the gather runs instead.  On one H200 with split operands (kernelbench_search.md, section
# 31) l2_77's 3-D convolution (1.48 rows an output, kernel 5 on 20 x 36 x 36 outputs) ran 1.14x
# slower shifted; l2_13's (1.10) 1.10x faster.
_SHIFTED_WASTE = 1.25

# Whether this Triton lays a gathered tile's lanes along its first dimension where it cannot tell
# which runs along consecutive addresses (3.6 and before; 3.7 and after, the last): the kernels'
# _gather then loads the tile as it is, else turned.  Read from the TTGIR of the taps kernel
# compiled by Triton 3.5 to 3.9 for sm_90 (kernelbench_search.md, section 24).
_ROWS_FIRST = tuple(int(part) for part in triton.__version__.split(".")[:2]) < (3, 7)


def _gcd(a: int, b: int) -> int:
    # not math.gcd: a seed carries this text under its own imports, which do not include math
    while b:
        a, b = b, a % b
    return a


def _count(sizes) -> int:
    count = 1
    for size in sizes:
        count *= int(size)
    return count

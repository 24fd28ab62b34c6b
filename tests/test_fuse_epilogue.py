"""Operator fuse_epilogue: the pointwise kernel after a seed's convolution folded into its epilogue.
Parent and child run in Triton's interpreter on the CPU (compiled on a GPU) against PyTorch."""
import ast

import pytest
import torch

from evaluator.conv_seed import CONV_LIBRARY, replace_convolutions
from operators.conv_output import Channel, channel_of
from operators.fuse_epilogue import FuseEpilogue
from tests.support.modules import load_source
from tests.support.proposals import as_seed, child_of

# In Triton's interpreter on the CPU even where there is a GPU: the suite imports Triton interpreted, and a
# kernel compiled for the GPU in this process cannot call triton.language's own jit functions
# (tests/support/modules.py, run_compiled).
DEVICE = "cpu"

# inductor's pointwise kernel as it writes one: the convolution's bias, a ReLU and a per-channel scale,
# in place (in_out_ptr0) or into a buffer of its own laid out with a padded row (STORE_AT)
POINTWISE = '''
@triton.jit
def triton_poi_fused_add_convolution_mul_relu_0({params}, xnumel, XBLOCK : tl.constexpr):
    xnumel = {numel}
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x3 = xindex
    x1 = ((xindex // {plane}) % {channels})
    x0 = (xindex % {plane})
    x4 = xindex // {plane}
    tmp0 = tl.load({output} + ({read_at}), xmask)
    tmp1 = tl.load(in_ptr0 + (x1), xmask, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp3 = tl.full([1], 0, tl.int32)
    tmp4 = triton_helpers.maximum(tmp3, tmp2)
    tmp5 = tl.load(in_ptr1 + (x1), xmask)
    tmp6 = tmp4 * tmp5
    tl.store({target} + ({store_at}), tmp6, xmask)


def _launch_0({params}, xnumel):
    grid = (triton.cdiv(xnumel, K0_BLOCK_X), 1, 1,)
    triton_poi_fused_add_convolution_mul_relu_0[grid]({params}, xnumel, XBLOCK=K0_BLOCK_X, num_warps=K0_NUM_WARPS, num_stages=K0_NUM_STAGES)
'''


def _seed(conv: torch.nn.Conv2d, x_shape, *, in_place=True, read_at="x3", numel=None, channels_last=False) -> str:
    """A seed as the converter writes one for ``conv`` then the pointwise kernel above (the
    convolution's output laid out channels-last where asked, as inductor may ask for it)."""
    n, _, h, w = x_shape
    out = conv(torch.zeros(x_shape)).shape
    plane, channels = out[2] * out[3], out[1]
    size, stride = tuple(out), (channels * plane, plane, out[3], 1)
    if channels_last:
        stride = (channels * plane, 1, out[3] * channels, channels)
    shape = ", ".join(map(str, conv.weight.shape))
    lines = [f"assert_size_stride(arg0_1, ({shape}), (1, 1, 1, 1))",
             f"buf0 = extern_kernels.convolution(arg2_1, arg0_1, stride={conv.stride}, padding={conv.padding}, "
             f"dilation={conv.dilation}, transposed=False, output_padding=(0, 0), groups={conv.groups}, bias=None)",
             f"assert_size_stride(buf0, {size}, {stride})"]
    wrapper, constants, launchers = replace_convolutions(lines, 1, "ieee")
    padded = (channels * (plane + 3), plane + 3, out[3], 1)  # each plane 3 elements apart, as inductor pads
    if in_place:
        params, output, target, store_at = "in_out_ptr0, in_ptr0, in_ptr1", "in_out_ptr0", "in_out_ptr0", "x3"
        calls = ["buf1 = buf0; del buf0  # reuse", f"_launch_0(buf1, arg1_1, arg3_1, {numel or out.numel()})"]
    else:  # into a buffer of its own, allocated between the two launches
        params, output, target, store_at = "in_ptr0, in_ptr1, in_ptr2, out_ptr0", "in_ptr2", "out_ptr0", \
            f"x0 + {padded[1]}*x4"
        if channels_last:  # laid out as the output, at each element's own offset
            padded, store_at = stride, "x3"
        calls = [f"buf1 = _empty({size}, {padded}, torch.float32)",
                 f"_launch_0(arg1_1, arg3_1, buf0, buf1, {numel or out.numel()})", "del buf0"]
    pointwise = POINTWISE.format(params=params, numel=numel or out.numel(), plane=plane, channels=channels,
                                 output=output, read_at=read_at, target=target, store_at=store_at)
    if channels_last:  # the channel is the offset's last digit
        pointwise = pointwise.replace(f"x1 = ((xindex // {plane}) % {channels})", f"x1 = xindex % {channels}")
    body = "\n".join(f"        {line}" for line in wrapper[1:2] + calls)
    return f'''import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers

K0_BLOCK_X = 64
K0_NUM_WARPS = 4
K0_NUM_STAGES = 1
{chr(10).join(constants)}
{pointwise}

{CONV_LIBRARY}
{chr(10).join(launchers)}

def _call(args, device):
    def _empty(size, stride, dtype):
        return torch.empty_strided(size, stride, dtype=dtype, device=device)

    arg0_1, arg1_1, arg2_1, arg3_1 = args
    if True:
{body}
    return (buf1, )
'''


def _run(source: str, tmp_path, name: str, args):
    return load_source(source, tmp_path, name, compiled=False)._call(args, DEVICE)[0]


def _child(source: str):
    return FuseEpilogue().applies_to(as_seed(source)), child_of(FuseEpilogue(), source)


@pytest.mark.slow
@pytest.mark.parametrize("conv, x_shape, channels_last", [
    (torch.nn.Conv2d(4, 6, 3, padding=1), (2, 4, 5, 6), False),  # 4 channels: the general loop
    (torch.nn.Conv2d(16, 5, 3, stride=2), (1, 16, 7, 6), False),  # 16: the taps loop
    (torch.nn.Conv2d(3, 3, 3, padding=1, groups=3), (2, 3, 4, 5), False),  # depthwise: the direct kernel
    (torch.nn.Conv2d(4, 6, 3, padding=1), (2, 4, 5, 6), True),  # the output channels-last
])
@pytest.mark.parametrize("in_place", [True, False])
def test_the_pointwise_kernel_runs_in_the_convolutions_epilogue_and_gives_its_result(conv, x_shape, channels_last,
                                                                                     in_place, tmp_path):
    torch.manual_seed(0)
    seed = _seed(conv, x_shape, in_place=in_place, channels_last=channels_last)
    applies, proposal = _child(seed)
    assert applies and proposal.source is not None, proposal.note
    child = proposal.source
    # the channel is the tile's columns, its parameters loaded once a column
    epilogue = child.split("def _epilogue(")[1].split("@triton.jit")[0]
    assert "x1 = cols" in epilogue and "tl.load(ep0_ptr + x1, col_mask" in epilogue
    assert ", tmp6, mask)" in epilogue  # the store: once an element
    # one launch fewer: the kernel, its launcher and its tunables are gone, its tensors passed along
    assert "triton_poi_fused" not in child.split("def _epilogue(")[0] and "_launch_0(" not in child
    assert "K0_BLOCK_X" not in child
    operands = "arg1_1, arg3_1," if in_place else "arg1_1, arg3_1, buf1,"
    assert f"epilogue=({operands}))" in child
    if not in_place:  # the buffer it writes is allocated before the convolution now
        assert child.index("buf1 = _empty(") < child.index("buf0 = _launch_1(")
    weight, bias = conv.weight.detach().to(DEVICE), conv.bias.detach().to(DEVICE)
    x, scale = torch.randn(x_shape, device=DEVICE), torch.rand(bias.shape, device=DEVICE) + 0.5
    args = [weight, bias, x, scale]
    with torch.no_grad():
        expected = torch.relu(torch.nn.functional.conv2d(x, weight, bias, conv.stride, conv.padding, conv.dilation,
                                                         conv.groups)) * scale[None, :, None, None]
    got_parent = _run(seed, tmp_path, f"parent_{in_place}", args)
    got_child = _run(child, tmp_path, f"child_{in_place}", args)
    torch.testing.assert_close(got_parent, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got_child, expected, atol=1e-4, rtol=1e-4)
    assert got_child.stride() == got_parent.stride()


def test_the_channel_is_recognised_by_the_outputs_layout_and_nothing_else_is():
    def channel(size, stride):
        return channel_of(ast.parse(f"f(x, out_size={size}, out_stride={stride})", mode="eval").body)

    def computes(layout, text, identity=("xindex", "x3")):
        return layout.computed_by(ast.parse(text, mode="eval").body, set(identity))

    nchw = channel((2, 6, 5, 4), (120, 20, 4, 1))
    assert nchw == Channel(20, 6, False)
    assert computes(nchw, "xindex // 20 % 6") and computes(nchw, "((x3 // 20) % 6)")
    assert not computes(nchw, "xindex // 20")  # the batch lies above it: not the channel alone
    assert not computes(nchw, "xindex // 4 % 6") and not computes(nchw, "xindex // 20 % 5")
    assert not computes(nchw, "x0 // 20 % 6")  # not the element's offset
    assert computes(channel((1, 6, 5, 4), (120, 20, 4, 1)), "xindex // 20")  # batch 1: outermost
    last = channel((2, 6, 5, 4), (120, 1, 24, 6))  # channels-last
    assert computes(last, "xindex % 6") and not computes(last, "xindex // 6 % 6")
    assert channel((2, 6), (6, 1)) == Channel(1, 6, False) and channel((1, 6), (6, 1)).outermost
    assert channel_of(ast.parse("f(x)", mode="eval").body) is None  # no layout stated


def test_a_parent_whose_library_predates_the_columns_keeps_the_gather():
    # a resumed run's parents carry the library as it was: an epilogue without cols, col_mask
    old = _seed(torch.nn.Conv2d(4, 6, 3, padding=1), (2, 4, 5, 6)).replace(
        "ep4_ptr, ep5_ptr, cols, col_mask):", "ep4_ptr, ep5_ptr):").replace(
        ", channels[None, :], n_mask[None, :])", ")").replace(", group, True)", ")")
    assert "ep5_ptr, cols" not in old and "channels[None, :], n_mask" not in old
    child = _child(old)[1].source
    epilogue = child.split("def _epilogue(")[1].split("@triton.jit")[0]
    assert epilogue.startswith("acc, out_ptr, offsets, mask, ep0_ptr, ep1_ptr, ep2_ptr, ep3_ptr, ep4_ptr, ep5_ptr):")
    assert "x1 = xindex // 30 % 6" in epilogue and "tl.load(ep0_ptr + x1, mask" in epilogue and "cols" not in epilogue


def test_what_the_epilogue_cannot_take_is_refused_with_its_reason():
    conv = torch.nn.Conv2d(4, 6, 3, padding=1)
    shape = (2, 4, 5, 6)
    # the output read elsewhere than at the element's own offset
    applies, proposal = _child(_seed(conv, shape, read_at="x3 + 1"))
    assert not applies and "reads the convolution's output elsewhere than at xindex" in proposal.note
    # a kernel over fewer elements than the output holds
    applies, proposal = _child(_seed(conv, shape, numel=300))
    assert not applies and "300 elements" in proposal.note
    # already fused: the library has one epilogue
    fused = _child(_seed(conv, shape))[1].source
    applies, proposal = _child(fused)
    assert not applies and proposal.source is None
    # no convolution at all
    applies, proposal = _child("x = 1\n")
    assert not applies and "no convolution" in proposal.note


def test_a_buffer_written_elsewhere_keeps_the_output_where_it_is_read_again():
    seed = _seed(torch.nn.Conv2d(4, 6, 3, padding=1), (2, 4, 5, 6), in_place=False)
    reread = seed.replace("        del buf0\n", "        buf2 = buf0 + 1\n")
    applies, proposal = _child(reread)
    assert not applies and "read afterwards" in proposal.note
    # returned after the `if True:` block is read afterwards too
    returned = seed.replace("        del buf0\n", "").replace("    return (buf1, )", "    return (buf1, buf0)")
    applies, proposal = _child(returned)
    assert not applies and "read afterwards" in proposal.note
    assert _child(seed)[0]  # as the converter writes it: the output deleted, not read


def test_a_math_epilogue_gives_a_wide_tile_more_warps():
    # tanh per element beside a 128 x 64 tile's accumulators: 4 warps hold 64 outputs a thread, 8 hold 32
    conv = torch.nn.Conv2d(4, 64, 3, padding=1)  # 64 output channels: the seed's tile is 128 x 64 in 4 warps
    seed = _seed(conv, (2, 4, 5, 6)).replace("tmp6 = tmp4 * tmp5", "tmp6 = libdevice.tanh(tmp4) * tmp5")
    seed = seed.replace("from torch._inductor.runtime import triton_helpers",
                        "from torch._inductor.runtime import triton_helpers\nfrom triton.language.extra import libdevice")
    assert "K1_BLOCK_M = 128\nK1_BLOCK_N = 64\n" in seed and "K1_NUM_WARPS = 4\n" in seed
    child = _child(seed)[1].source
    assert "libdevice.tanh(tmp4)" in child.split("def _epilogue(")[1] and "K1_NUM_WARPS = 8\n" in child
    # without the call the warps stay
    assert "K1_NUM_WARPS = 4\n" in _child(_seed(conv, (2, 4, 5, 6)))[1].source

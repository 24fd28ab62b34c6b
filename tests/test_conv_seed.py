"""Where inductor calls cuDNN, what a seed launches instead (evaluator/conv_seed.py): the tile it
starts from, the weight's shape read from inductor's wrapper, and the switches a call site gets."""
import pytest

from evaluator.conv_seed import _convolution_shape, replace_convolutions, seed_tile


def test_a_seed_starts_from_a_tile_suited_to_its_output_channels_and_loop():
    def tile(shape, transposed=False, groups=1, strided=False, precision="tf32"):
        return seed_tile(shape, transposed, groups, strided=strided, precision=precision)

    # TF32 at stride 1 from 16 inputs: shifted windows (SHIFTED_TILE, SHIFTED_WIDE_TILE)
    assert tile((128, 64, 3, 3)) == (128, 128, 32, 8, 3)
    assert tile((64, 128, 3, 5), transposed=True) == (128, 128, 32, 8, 3)  # transposed: (in, out, ...)
    assert tile((64, 64, 3, 3)) == (128, 64, 32, 4, 3)
    # with a stride, the gather: 128 outputs WIDE_TF32_TILE, 64 the wide tile
    assert tile((128, 64, 3, 3), strided=True) == (128, 128, 32, 4, 3)
    assert tile((64, 64, 3, 3), strided=True) == (128, 64, 16, 4, 3)
    assert tile((64, 64, 3, 3), precision="ieee") == (128, 64, 16, 4, 3)
    assert tile((128, 64, 3, 3), precision="ieee") == (128, 128, 16, 8, 3)  # exact, taps loop: WIDE_SPLIT_TILE
    assert tile((128, 8, 3, 3), precision="ieee") == (128, 64, 16, 4, 2)  # ... not in the general loop's
    assert tile((64, 8, 3, 3)) == (128, 64, 16, 4, 2)  # 8 inputs, 64 outputs: the general loop's wide tile
    assert tile((32, 8, 3, 3, 3)) == (256, 32, 16, 4, 2)  # 32 outputs: its narrow one
    assert tile((8, 32, 3, 3), transposed=True, strided=True) == (64, 32, 32, 4, 2)  # ... unless it starts in taps
    assert tile((8, 32, 3, 3), transposed=True) == (256, 32, 16, 4, 2)  # at stride 1 it does not
    assert tile((8, 64, 3, 3), transposed=True, strided=True) == (128, 64, 16, 4, 3)  # taps, 64 outputs
    assert tile((32, 16, 3, 3)) == (64, 32, 32, 4, 2)  # 16 inputs: the taps loop's
    assert tile((16, 3, 3, 3, 3))[1] == 16
    assert tile((128, 1, 3, 3), groups=128)[0] == 256  # depthwise: the direct kernel's positions
    assert tile(None, groups=4) == (64, 16, 32, 4, 2)  # shape unknown: as before


def test_the_weights_shape_is_read_from_inductors_wrapper():
    lines = ["assert_size_stride(arg0_1, (64, 8, 3, 3), (72, 9, 3, 1))",
             "buf0 = extern_kernels.convolution(arg1_1, arg0_1, stride=(1, 1), padding=(0, 0), dilation=(1, 1), "
             "transposed=False, output_padding=(0, 0), groups=1, bias=None)"]
    args = lines[1].split("convolution(", 1)[1].rsplit(")", 1)[0]
    assert _convolution_shape(args, lines) == ((64, 8, 3, 3), False, 1)
    symbolic = ["assert_size_stride(arg0_1, (s0, 8, 3, 3), (72, 9, 3, 1))"]
    assert _convolution_shape(args, symbolic)[0] is None
    out, constants, launchers = replace_convolutions(lines, 3)
    assert "K3_BLOCK_M = 128" in constants[0] and "K3_NUM_STAGES = 2" in constants[0]  # the general loop's 64 outputs
    assert out[1].lstrip().startswith("buf0 = _launch_3(arg1_1, arg0_1")
    assert "K3_USE_TAPS_LOOP = 0" in constants[0]  # 8 channels: the general loop first, the taps loop the search's


@pytest.mark.parametrize("weight, transposed, groups, stride, taps_first", [
    ((64, 32, 3, 3), False, 1, 2, 1),  # 32 input channels, 64 outputs: either loop, the taps loop first
    ((32, 64, 3, 3), True, 1, 2, 1),  # transposed: (in, out, ...)
    ((64, 16, 3, 3), False, 2, 1, 1),  # 16 a group
    ((64, 8, 3, 3), False, 1, 2, 0),  # 8 channels: either loop, the general one first
    ((3, 16, 3, 3, 3), True, 1, 2, 1),  # 3 channels, transposed with a stride: the taps loop skips phases
    ((3, 16, 3, 3, 3), True, 1, 1, 0),  # ... at stride 1 it has none to skip
    ((64, 1, 3, 3), False, 64, 1, None),  # depthwise: the direct kernel
    ((16, 1, 5), True, 16, 2, None),  # transposed depthwise
    ((32, 64, 5), True, 1, 1, 1),  # 1-D at stride 1: shifted windows in TF32 only
])
@pytest.mark.parametrize("precision", ["ieee", "tf32"])
def test_a_call_site_that_can_run_either_loop_gets_a_switch(weight, transposed, groups, stride, taps_first, precision):
    shape = ", ".join(map(str, weight))
    dims = len(weight) - 2
    lines = [f"assert_size_stride(arg0_1, ({shape}), (1, 1, 1, 1))",
             f"buf0 = extern_kernels.convolution(arg1_1, arg0_1, stride={(stride,) * dims}, padding={(1,) * dims}, "
             f"dilation={(1,) * dims}, transposed={transposed}, output_padding={(0,) * dims}, groups={groups}, bias=None)"]
    _, constants, launchers = replace_convolutions(lines, 0, precision)
    switch = taps_first is not None
    assert (f"K0_USE_TAPS_LOOP = {taps_first}" in constants[0]) is switch
    assert ("taps_loop=K0_USE_TAPS_LOOP == 1" in launchers[0]) is switch
    # the gather from a channels-last copy first in TF32 from 16 channels a group (section 17); below,
    # NCHW where the taps loop comes first (transposed with a stride, section 29), else channels-last;
    # behind a switch of its own where the taps loop comes first; else fixed (it would flip nothing)
    wide = (weight[0] if transposed else weight[1]) >= 16
    gather = int(precision == "tf32" if wide else not (transposed and stride > 1))
    assert (f"K0_USE_CHANNELS_LAST = {gather}" in constants[0]) is (taps_first == 1)
    assert ("channels_last=K0_USE_CHANNELS_LAST == 1" in launchers[0]) is (taps_first == 1)
    assert (f"channels_last={bool(gather)}" in launchers[0]) is (taps_first == 0)
    # shifted windows where the taps loop comes first at stride 1: on in TF32 from 16 inputs and 64
    # outputs a group, else off (the strict twin turns it on from 64 outputs: evo.core.dot_precision)
    shifted = taps_first == 1 and stride == 1 and (precision == "tf32" or dims > 1)  # strict 1-D: none
    assert ("shifted=K0_USE_SHIFTED_WINDOWS == 1" in launchers[0]) is shifted
    outputs = (weight[1] if transposed else weight[0] // groups)  # from 64 a group (shifted_first)
    on = int(wide and precision == "tf32" and outputs >= 64)
    assert (f"K0_USE_SHIFTED_WINDOWS = {on}" in constants[0]) is shifted
    # transposed with a stride: a launch a phase behind a switch of its own, off (not yet timed on a GPU)
    phases = taps_first == 1 and stride > 1 and transposed and (precision == "tf32" or dims > 1)
    assert ("shifted=K0_USE_SHIFTED_PHASES == 1" in launchers[0]) is phases
    assert ("K0_USE_SHIFTED_PHASES = 0" in constants[0]) is phases


def test_the_strict_twin_leaves_the_phases_switch_to_the_search():
    from evo.core.dot_precision import _shifted_for_split

    source = ("K0_BLOCK_M = 128\nK0_BLOCK_N = 64\nK0_BLOCK_K = 32\nK0_USE_SHIFTED_PHASES = 0\n"
              "K1_BLOCK_M = 128\nK1_BLOCK_N = 64\nK1_BLOCK_K = 32\nK1_USE_SHIFTED_WINDOWS = 0\n")
    twin = _shifted_for_split(source)
    assert "K0_USE_SHIFTED_PHASES = 0" in twin and "K1_USE_SHIFTED_WINDOWS = 1" in twin


@pytest.mark.parametrize("precision", ["ieee", "tf32"])
@pytest.mark.parametrize("outputs, tile", [(128, "128, 128, 16, 8, 3"), (256, "128, 128, 16, 8, 3"),
                                           (64, "128, 64, 16, 4, 3")])
def test_a_strict_taps_loop_with_many_outputs_starts_from_the_tile_its_split_twin_runs_best(outputs, tile, precision):
    lines = [f"assert_size_stride(arg0_1, (64, {outputs}, 3, 5), (1, 1, 1, 1))",  # transposed: (in, out, ...)
             "buf0 = extern_kernels.convolution(arg1_1, arg0_1, stride=(1, 1), padding=(0, 0), dilation=(1, 1), "
             "transposed=True, output_padding=(0, 0), groups=1, bias=None)"]
    _, constants, _ = replace_convolutions(lines, 0, precision)
    values = dict(line.split(" = ") for line in constants[0].splitlines())
    got = ", ".join(values[f"K0_{n}"] for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "NUM_WARPS", "NUM_STAGES"))
    if precision == "ieee":
        assert got == tile
    else:  # TF32 (kernelbench's tolerance) at stride 1: shifted windows' tiles
        assert got == ("128, 64, 32, 4, 3" if outputs == 64 else "128, 128, 32, 8, 3")


@pytest.mark.parametrize("precision, gather", [("ieee", 0), ("tf32x3", 0), ("tf32", 1)])
def test_a_one_dimensional_convolution_gathers_channels_last_only_in_tf32(precision, gather):
    lines = ["assert_size_stride(arg0_1, (32, 64, 5), (320, 5, 1))",
             "buf0 = extern_kernels.convolution(arg1_1, arg0_1, stride=(2,), padding=(1,), dilation=(1,), "
             "transposed=True, output_padding=(0,), groups=1, bias=None)"]
    _, constants, launchers = replace_convolutions(lines, 0, precision)
    assert "K0_USE_TAPS_LOOP = 1" in constants[0] and f"K0_USE_CHANNELS_LAST = {gather}" in constants[0]
    assert "channels_last=K0_USE_CHANNELS_LAST == 1" in launchers[0]

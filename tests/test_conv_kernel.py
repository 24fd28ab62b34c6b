"""The seeds' Triton convolution (evaluator/conv_kernel.py's kernels launched by conv_launch.py, as
one module: what a seed carries) against PyTorch's, in Triton's interpreter (the tile a seed starts
from: tests/test_conv_seed.py)."""
import os
from pathlib import Path

import pytest
import torch

from evaluator import conv_library
from evaluator.conv_seed import CONV_LIBRARY
from evo.core.kernel_source import find_tunables, with_values
from tests.support.modules import load_module

TRANSPOSED = (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)


def _load(path: Path, name: str):
    """A version of the library as a module, in Triton's interpreter on the CPU even where there is a
    GPU: the suite imports Triton interpreted, and a kernel compiled for the GPU in this process
    cannot call triton.language's own jit functions (tests/support/modules.py, run_compiled)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs Triton's interpreter (TRITON_INTERPRET=1)")
    return load_module(path, name, compiled=False)


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    """``_convolution`` and the device it runs on, loaded from the library's text as seeds carry it."""
    path = tmp_path_factory.mktemp("conv") / "conv_library_under_test.py"
    path.write_text(conv_library.module_text())
    return _load(path, "conv_library_under_test")._convolution, "cpu"


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    # (torch module, input shape): depthwise (one output channel a group) takes the direct kernel
    (lambda: torch.nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=True), (2, 4, 7, 9)),
    (lambda: torch.nn.Conv2d(3, 3, (2, 3), stride=2, dilation=(1, 2), groups=3, bias=False), (1, 3, 9, 11)),
    (lambda: torch.nn.Conv2d(4, 2, 3, groups=2, bias=True), (2, 4, 6, 6)),  # two inputs to one output a group
    (lambda: torch.nn.Conv1d(1, 1, 5, padding=2), (3, 1, 17)),  # one output channel, no groups
    (lambda: torch.nn.ConvTranspose1d(3, 3, 3, stride=2, padding=1, output_padding=1, groups=3), (2, 3, 8)),
    (lambda: torch.nn.Conv3d(2, 2, 3, padding=1, groups=2), (1, 2, 4, 5, 6)),
    (lambda: torch.nn.ConvTranspose2d(3, 3, (3, 2), padding=(1, 0), dilation=(1, 2), groups=3), (2, 3, 5, 6)),
    (lambda: torch.nn.Conv2d(2, 2, (2, 3), padding=(0, 2), dilation=(2, 1), groups=2, bias=False), (1, 2, 6, 7)),
    # the tiled implicit GEMM, for comparison on the same footing
    (lambda: torch.nn.Conv2d(3, 8, 3, padding=1), (2, 3, 6, 6)),
    (lambda: torch.nn.ConvTranspose2d(4, 6, (3, 5), padding=(1, 2)), (2, 4, 5, 6)),
    # 16 channels a group or more: taps outermost (transposed: one output phase a program)
    (lambda: torch.nn.ConvTranspose2d(16, 6, 3, stride=2, padding=1, output_padding=1), (2, 16, 5, 6)),
    (lambda: torch.nn.ConvTranspose2d(16, 6, 3, stride=5, padding=1, dilation=2), (1, 16, 4, 5)),
    (lambda: torch.nn.ConvTranspose3d(16, 4, 3, stride=2, padding=1), (1, 16, 3, 4, 3)),
    (lambda: torch.nn.ConvTranspose1d(20, 6, 5, stride=3, padding=2, dilation=2, output_padding=1), (2, 20, 7)),
    (lambda: torch.nn.ConvTranspose2d(32, 8, (3, 2), stride=(2, 1), groups=2, bias=False), (1, 32, 5, 4)),
    (lambda: torch.nn.ConvTranspose2d(16, 6, (3, 5), padding=(1, 2)), (2, 16, 5, 6)),
    # admitted taps 1, 2 or 3 apart (stride over its gcd with the dilation), stride and dilation by dimension
    (lambda: torch.nn.ConvTranspose2d(16, 6, 4, stride=(4, 2), dilation=(2, 3), padding=(3, 1), output_padding=1),
     (1, 16, 3, 4)),
    (lambda: torch.nn.ConvTranspose3d(16, 4, (2, 3, 5), stride=(3, 1, 2), padding=(0, 1, 2)), (1, 16, 2, 3, 4)),
    (lambda: torch.nn.Conv2d(16, 8, 3, stride=2, padding=1, dilation=(1, 2)), (2, 16, 7, 9)),
    (lambda: torch.nn.Conv3d(32, 4, 3, padding=1, groups=2), (1, 32, 3, 4, 5)),
    (lambda: torch.nn.Conv1d(20, 6, 5, stride=3, padding=2, dilation=2), (2, 20, 17)),
    # fewer than 16 channels a group: the general kernel, strided
    (lambda: torch.nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1), (1, 3, 3, 4, 3)),
])
def test_the_convolution_matches_pytorchs_on_the_direct_and_the_tiled_path(conv, case):
    convolution, device = conv
    make, shape = case
    torch.manual_seed(0)
    module = make().to(device)
    x = torch.randn(shape, device=device)
    transposed = isinstance(module, TRANSPOSED)
    out = convolution(x, module.weight.detach(), None if module.bias is None else module.bias.detach(), module.stride,
               module.padding, module.dilation, transposed, module.output_padding if transposed else (0,),
               module.groups, block_m=16, block_n=16, block_k=16)
    tf32, torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32, False  # as references run
    try:
        with torch.no_grad():
            expected = module(x)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    assert out.shape == expected.shape
    # The engine's strict tolerance: cuDNN's own fp32 algorithms (Winograd, FFT) differ from a direct
    # sum by more than fp32's rounding
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    # the taps kernel gathering from a channels-last copy, its weight packed channels innermost
    (lambda: torch.nn.Conv2d(16, 8, 3, stride=2, padding=1, dilation=(1, 2)), (2, 16, 7, 9)),
    (lambda: torch.nn.Conv3d(32, 4, 3, padding=1, groups=2), (1, 32, 3, 4, 5)),
    (lambda: torch.nn.Conv1d(20, 6, 5, stride=3, padding=2, dilation=2), (2, 20, 17)),
    (lambda: torch.nn.ConvTranspose2d(16, 6, 3, stride=2, padding=1, output_padding=1), (2, 16, 5, 6)),
    (lambda: torch.nn.ConvTranspose2d(32, 8, (3, 2), stride=(2, 1), groups=2, bias=False), (1, 32, 5, 4)),
    (lambda: torch.nn.ConvTranspose3d(16, 4, (2, 3, 5), stride=(3, 1, 2), padding=(0, 1, 2)), (1, 16, 2, 3, 4)),
])
@pytest.mark.parametrize("layout", ["contiguous", "channels-last", "strided"])
def test_the_channels_last_gather_matches_pytorchs(conv, case, layout):
    convolution, device = conv
    make, shape = case
    torch.manual_seed(0)
    module = make().to(device)
    x = torch.randn(shape, device=device)  # contiguous: copied channels-last by the library's Triton kernel
    if layout == "channels-last":  # no copy: the kernel reads the caller's tensor through its strides
        x = x.movedim(1, -1).contiguous().movedim(-1, 1)
    elif layout == "strided":  # neither: copied by PyTorch
        x = torch.randn((*shape[:-1], 2 * shape[-1]), device=device)[..., ::2]
    transposed = isinstance(module, TRANSPOSED)
    out = convolution(x, module.weight.detach(), None if module.bias is None else module.bias.detach(), module.stride,
                      module.padding, module.dilation, transposed, module.output_padding if transposed else (0,),
                      module.groups, block_m=16, block_n=16, block_k=16, channels_last=True)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # as references run
        expected = module(x)
    assert out.is_contiguous()  # the output keeps PyTorch's default layout whatever the gather
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("channels_last, rows_first", [(False, True), (False, False), (True, True)])
@pytest.mark.parametrize("case", [
    # fewer than 16 channels a group: the taps kernel where asked (most of each 16-deep step masked)
    (lambda: torch.nn.Conv2d(8, 6, 3, padding=1), (2, 8, 5, 6)),
    (lambda: torch.nn.ConvTranspose3d(12, 4, 3, stride=2, padding=1), (1, 12, 2, 3, 3)),
    (lambda: torch.nn.Conv2d(20, 6, (2, 3), groups=2), (1, 20, 4, 5)),  # 10 a group
    (lambda: torch.nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1, output_padding=1), (1, 3, 2, 3, 2)),
    (lambda: torch.nn.Conv1d(3, 5, 3, dilation=2), (2, 3, 9)),
])
def test_the_taps_kernel_runs_with_few_channels_a_group_where_asked(conv, case, channels_last, rows_first,
                                                                   monkeypatch):
    convolution, device = conv
    monkeypatch.setitem(convolution.__globals__, "_conv_kernel", None)  # the general kernel is not called
    # the NCHW gather loaded as it is laid out, or turned (_gather: by Triton's version)
    monkeypatch.setitem(convolution.__globals__, "_ROWS_FIRST", rows_first)
    make, shape = case
    torch.manual_seed(0)
    module = make().to(device)
    x = torch.randn(shape, device=device)
    transposed = isinstance(module, TRANSPOSED)
    out = convolution(x, module.weight.detach(), module.bias.detach(), module.stride, module.padding,
                      module.dilation, transposed, module.output_padding if transposed else (0,), module.groups,
                      block_m=16, block_n=16, block_k=16, taps_loop=True, channels_last=channels_last)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # as references run
        expected = module(x)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shape", [(2, 40, 3, 70), (1, 33, 130), (3, 16, 2, 3, 5)])
def test_the_channels_last_copy_keeps_every_value_with_the_channels_innermost(conv, shape):
    convolution, device = conv
    x = torch.randn(shape, device=device)  # channels and positions not multiples of the copy's tile
    y = convolution.__globals__["_channels_last"](x)
    assert y.shape == x.shape and y.stride(1) == 1 and y.data_ptr() != x.data_ptr()
    assert torch.equal(y, x)
    assert convolution.__globals__["_channels_last"](y) is y  # already channels-last: no copy


@pytest.mark.parametrize("block_c, block_s", [(16, 64), (32, 32), (64, 128), (8, 16)])
def test_the_channels_last_copy_stays_whole_at_any_tile_the_search_gives_it(tmp_path, block_c, block_s):
    # the copy's BLOCK_C and BLOCK_S are tunables to the search (a seed carries them as literals);
    # its grid must follow them, or part of the copy is never written (section 17's NaN children)
    library = conv_library.seed_text()
    header = conv_library.module_text()[:-len(library)]
    tunables = {}
    for tunable in find_tunables(library):  # the first of each name: the padded copy's come later
        tunables.setdefault(tunable.name, tunable)  # (tests/test_conv_shifted.py)
    assert set(tunables) == {"BLOCK_C", "BLOCK_S", "BLOCK"}  # BLOCK: the TF32 split's
    path = tmp_path / "conv_moved.py"
    path.write_text(header + with_values(library, {tunables["BLOCK_C"]: block_c, tunables["BLOCK_S"]: block_s,
                                                   tunables["BLOCK"]: 4 * block_s}))
    module = _load(path, f"conv_moved_{block_c}_{block_s}")
    x = torch.randn(2, 40, 3, 70)
    assert torch.equal(module._channels_last(x), x)
    for parts in (module._channels_last(x, split=True), module._split(x)):  # every element of both parts
        torch.testing.assert_close(_whole(parts, x.numel()), x, rtol=2.0 ** -21, atol=0)


def _second(first, lo: int) -> torch.Tensor:
    """A split copy's second part, ``lo`` elements after ``first``'s start, laid out as ``first``."""
    return torch.as_strided(first, first.shape, first.stride(), first.storage_offset() + lo)


def _whole(first, lo: int) -> torch.Tensor:
    return first + _second(first, lo)


@pytest.mark.parametrize("split", ["copy", "channels-last copy"])
def test_a_split_copy_holds_each_value_as_a_tf32_part_and_the_rest(conv, split):
    convolution, device = conv
    torch.manual_seed(0)
    x = torch.randn(2, 40, 3, 70, device=device) * torch.logspace(-30, 30, 70, device=device)
    x[0, 0, 0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0])
    first = convolution.__globals__["_split"](x) if split == "copy" else \
        convolution.__globals__["_channels_last"](x, split=True)
    assert first.shape == x.shape and (split == "copy" or first.stride(1) == 1)
    second = _second(first, x.numel())
    for part in (first, second):  # both in TF32 (10 mantissa bits, nothing below): read exactly
        assert torch.all(part.view(torch.int32) & 8191 == 0)
    finite = torch.isfinite(x)
    assert torch.all(second[finite].abs() <= x[finite].abs() * 2.0 ** -11)  # the first rounded to nearest
    assert torch.all((first + second - x)[finite].abs() <= x[finite].abs() * 2.0 ** -22)
    big = torch.tensor([3.4028235e38, -3.4028235e38], device=device)  # would round to inf: cut instead
    assert torch.all(torch.isfinite(convolution.__globals__["_split"](big)))
    # inf and NaN stay in the first part, the second is zero there (no inf - inf = NaN)
    assert torch.equal(first[~finite].isnan(), x[~finite].isnan()) and torch.all(second[~finite] == 0)
    assert torch.equal(first[0, 0, 0, :2], x[0, 0, 0, :2])


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["taps, NCHW", "taps, channels-last", "general"])
@pytest.mark.parametrize("case", [
    (lambda: torch.nn.Conv2d(16, 8, 3, stride=2, padding=1, dilation=(1, 2)), (2, 16, 7, 9)),
    (lambda: torch.nn.ConvTranspose2d(32, 8, (3, 2), stride=(2, 1), groups=2, bias=False), (1, 32, 5, 4)),
    (lambda: torch.nn.ConvTranspose2d(20, 12, (3, 5), padding=(1, 2)), (2, 20, 5, 6)),
    (lambda: torch.nn.Conv1d(20, 6, 5, stride=3, padding=2, dilation=2), (2, 20, 17)),
    (lambda: torch.nn.Conv3d(3, 8, 3), (1, 3, 4, 5, 5)),  # 3 channels: the general loop's own
])
def test_three_tf32_products_of_split_operands_match_pytorchs(conv, case, loop, monkeypatch):
    # Triton's interpreter multiplies in fp32 whatever the precision: this checks the parts are
    # read where they were written and all three products are summed, not TF32's rounding
    convolution, device = conv
    monkeypatch.setitem(convolution.__globals__, "_conv_taps_kernel" if loop == "general" else "_conv_kernel", None)
    make, shape = case
    torch.manual_seed(0)
    module = make().to(device)
    x = torch.randn(shape, device=device) * 1e3  # large: a missing second part would show
    transposed = isinstance(module, TRANSPOSED)
    out = convolution(x, module.weight.detach(), None if module.bias is None else module.bias.detach(), module.stride,
                      module.padding, module.dilation, transposed, module.output_padding if transposed else (0,),
                      module.groups, block_m=16, block_n=16, block_k=16, taps_loop=loop != "general",
                      channels_last=loop.endswith("channels-last"), split=True)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # as references run
        expected = module(x)
    torch.testing.assert_close(out, expected, atol=1e-4 * 1e3, rtol=1e-4)


def test_a_strided_transposed_convolution_visits_only_the_taps_its_phases_admit(conv, monkeypatch):
    """With a stride, an output takes a tap only where the stride divides its offset: the taps kernel
    (each program one phase's rows) alone computes it, and right."""
    convolution, device = conv
    monkeypatch.setitem(convolution.__globals__, "_conv_kernel", None)  # the general kernel is not called
    torch.manual_seed(0)
    module = torch.nn.ConvTranspose2d(16, 4, 3, stride=(3, 2), padding=1, dilation=(2, 1), output_padding=(1, 0))
    module = module.to(device)
    x = torch.randn(1, 16, 3, 4, device=device)
    out = convolution(x, module.weight.detach(), module.bias.detach(), module.stride, module.padding, module.dilation,
                      True, module.output_padding, 1, block_m=16, block_n=16, block_k=16)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # as references run
        expected = module(x)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("transposed", [False, True])
def test_switched_to_the_general_loop_a_convolution_of_many_channels_is_still_right(conv, transposed, monkeypatch):
    convolution, device = conv
    monkeypatch.setitem(convolution.__globals__, "_conv_taps_kernel", None)  # not called with the switch off
    torch.manual_seed(0)
    module = (torch.nn.ConvTranspose2d(16, 6, 3, stride=2, padding=1, output_padding=1) if transposed
              else torch.nn.Conv2d(16, 6, 3, stride=2, padding=1)).to(device)
    x = torch.randn(2, 16, 5, 6, device=device)
    out = convolution(x, module.weight.detach(), module.bias.detach(), module.stride, module.padding, module.dilation,
                      transposed, module.output_padding if transposed else (0,), 1,
                      block_m=16, block_n=16, block_k=16, taps_loop=False)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # as references run
        expected = module(x)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("offsets_32", [True, False])
@pytest.mark.parametrize("rows_first", [True, False])
@pytest.mark.parametrize("case", [
    # the general kernel: no padding (no bounds checked), padded along some dimensions, transposed at
    # stride 1 (bounds on both sides) and with a stride (each element's phase), 1 to 3 dimensions
    (lambda: torch.nn.Conv3d(3, 5, (2, 3, 3), stride=(1, 2, 3), dilation=(2, 1, 1)), (2, 3, 5, 8, 10)),
    (lambda: torch.nn.Conv1d(2, 4, 3, stride=2), (3, 2, 11)),
    (lambda: torch.nn.Conv2d(4, 6, (3, 2), padding=(1, 0), groups=2), (2, 4, 6, 5)),
    (lambda: torch.nn.ConvTranspose2d(3, 4, (2, 3), dilation=(1, 2), padding=(0, 1)), (2, 3, 4, 5)),
    (lambda: torch.nn.ConvTranspose1d(4, 2, 3, stride=2, padding=1, output_padding=1, groups=2), (2, 4, 6)),
    # taps outermost (C_PAD): 5 channels padded to 8, two taps a step of 16, the last step half empty
    (lambda: torch.nn.Conv2d(5, 3, 3, padding=(1, 0)), (2, 5, 5, 6)),
    # 20 channels a group, more than a step holds: channels outermost
    (lambda: torch.nn.Conv2d(40, 6, 3, padding=1, groups=2), (1, 40, 4, 5)),
])
def test_the_general_kernel_gathers_in_int32_or_int64_and_either_way_round_alike(conv, case, offsets_32, rows_first,
                                                                                 monkeypatch):
    # rows_first: the gathered tiles loaded as they are, else turned (_gather: by Triton's version)
    convolution, device = conv
    monkeypatch.setitem(convolution.__globals__, "_INT32_SPAN", 2 ** 30 if offsets_32 else 0)
    monkeypatch.setitem(convolution.__globals__, "_ROWS_FIRST", rows_first)
    make, shape = case
    torch.manual_seed(0)
    module = make().to(device)
    x = torch.randn(shape, device=device)
    transposed = isinstance(module, TRANSPOSED)
    out = convolution(x, module.weight.detach(), module.bias.detach(), module.stride, module.padding, module.dilation,
                      transposed, module.output_padding if transposed else (0,), module.groups,
                      block_m=16, block_n=16, block_k=16, taps_loop=False)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # as references run
        expected = module(x)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def test_the_library_a_seed_carries_is_the_kernels_then_their_launch(tmp_path):
    text = conv_library.seed_text()
    assert text == CONV_LIBRARY and "from evaluator" not in text  # a seed runs it under its own imports
    assert text.index("def _conv_kernel(") < text.index("def _conv_taps_kernel(") < text.index("def _convolution(")
    assert text.endswith("return count\n")  # where experiments/precision_probe.py's _current_library ends it
    path = tmp_path / "conv_library_alone.py"
    path.write_text(conv_library.module_text())
    assert callable(load_module(path, "conv_library_alone", compiled=False)._convolution)  # self-contained
    # a probe's version of the library: this tree's parts stand for the whole; any other file for itself
    for part in conv_library.PARTS:
        assert conv_library.library_source(part) == conv_library.module_text()
    older = tmp_path / "conv_kernel_before.py"
    older.write_text("def _convolution(*args):\n    pass\n")
    assert conv_library.library_source(older) == older.read_text()

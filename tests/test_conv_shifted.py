"""Shifted windows over a zero-padded channels-last copy (evaluator/conv_shifted.py), as a seed's
library launches them, against PyTorch's convolution, in Triton's interpreter or on the GPU."""
import pytest
import torch

from evaluator import conv_library
from evo.core.kernel_source import find_tunables, with_values
from tests.test_conv_kernel import TRANSPOSED, _load

CASES = [
    # stride 1: padded, dilated, asymmetric kernels; transposed (taps flipped), with padding beyond
    # the kernel's reach (the copy crops the input) and output padding; 1-D and 3-D; groups whose
    # channels are whole blocks; channels not a power of two (the last box reads zeros past them)
    (lambda: torch.nn.Conv2d(16, 8, 3, padding=1), (2, 16, 6, 7)),
    (lambda: torch.nn.Conv2d(16, 24, (3, 5), padding=(0, 2), dilation=(2, 1), bias=False), (2, 16, 9, 8)),
    (lambda: torch.nn.ConvTranspose2d(16, 6, (3, 5), padding=(1, 2)), (2, 16, 5, 6)),
    (lambda: torch.nn.ConvTranspose2d(16, 6, 3, padding=3), (1, 16, 9, 8)),
    (lambda: torch.nn.ConvTranspose2d(16, 6, 3, padding=1, output_padding=0, dilation=2), (1, 16, 5, 4)),
    (lambda: torch.nn.Conv1d(20, 6, 5, padding=2, dilation=2), (2, 20, 17)),
    (lambda: torch.nn.ConvTranspose3d(16, 4, 3, padding=1), (1, 16, 3, 4, 5)),
    (lambda: torch.nn.Conv3d(32, 4, 3, padding=1, groups=2), (1, 32, 3, 4, 5)),
    (lambda: torch.nn.ConvTranspose2d(16, 6, 3, padding=1, output_padding=1, dilation=2), (1, 16, 5, 4)),
    (lambda: torch.nn.ConvTranspose2d(32, 8, (3, 2), groups=2), (1, 32, 5, 4)),
    (lambda: torch.nn.Conv3d(16, 8, (2, 3, 3), padding=(1, 0, 2), dilation=(1, 2, 1)), (1, 16, 4, 6, 5)),
    # transposed with a stride: one launch a phase, its taps alone, its outputs stored a stride apart;
    # output padding, kernels of 4 (two taps every phase), a stride and dilation sharing no factor (a
    # dilated phase), 1-D at stride 3, 3-D, groups
    (lambda: torch.nn.ConvTranspose2d(16, 6, 3, stride=2, padding=1, output_padding=1), (2, 16, 5, 6)),
    (lambda: torch.nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1, bias=False), (1, 16, 4, 5)),
    (lambda: torch.nn.ConvTranspose2d(16, 6, (5, 3), stride=(2, 3), padding=(2, 1), dilation=(3, 1)), (1, 16, 4, 3)),
    (lambda: torch.nn.ConvTranspose1d(16, 4, 5, stride=3, padding=2, output_padding=1), (2, 16, 7)),
    (lambda: torch.nn.ConvTranspose3d(16, 4, 3, stride=2, padding=1), (1, 16, 2, 3, 3)),
    (lambda: torch.nn.ConvTranspose2d(32, 8, 3, stride=2, groups=2), (1, 32, 4, 4)),
]


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    path = tmp_path_factory.mktemp("shifted") / "conv_library_shifted.py"
    path.write_text(conv_library.module_text())
    return _load(path, "conv_library_shifted"), "cuda" if torch.cuda.is_available() else "cpu"


def _run(library, make, shape, *, split=False, scale=1.0, block_m=16):
    module_, device = library
    torch.manual_seed(0)
    module = make().to(device)
    x = torch.randn(shape, device=device) * scale
    transposed = isinstance(module, TRANSPOSED)
    out = module_._convolution(x, module.weight.detach(), None if module.bias is None else module.bias.detach(),
                               module.stride, module.padding, module.dilation, transposed,
                               module.output_padding if transposed else (0,), module.groups,
                               block_m=block_m, block_n=16, block_k=16, channels_last=True, split=split,
                               shifted=True)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # as references run
        return out, module(x)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("split", [False, True])
def test_shifted_windows_match_pytorchs_convolution(library, case, split, monkeypatch):
    module_, _ = library
    # neither gathering kernel runs: the shifted one computes every output alone
    monkeypatch.setitem(module_.__dict__, "_conv_taps_kernel", None)
    monkeypatch.setitem(module_.__dict__, "_conv_kernel", None)
    # these small inputs put most of the padded copy's rows outside the output: shifted anyway
    monkeypatch.setitem(module_.__dict__, "_SHIFTED_WASTE", float("inf"))
    # split: large values, so that a second part read from the wrong place or dropped would show
    out, expected = _run(library, *case, split=split, scale=1e3 if split else 1.0)
    assert out.shape == expected.shape and out.is_contiguous()
    torch.testing.assert_close(out, expected, atol=1e-4 * (1e3 if split else 1.0), rtol=1e-4)


@pytest.mark.parametrize("case, why", [
    ((lambda: torch.nn.Conv2d(16, 8, 3, stride=2, padding=1), (1, 16, 6, 7)), "a stride"),
    ((lambda: torch.nn.ConvTranspose2d(16, 8, 1, stride=2), (1, 16, 4, 5)), "a phase no tap reaches (bias alone)"),
    ((lambda: torch.nn.Conv2d(18, 8, 3, padding=1), (1, 18, 5, 6)), "rows of 18 floats: not 16-byte aligned"),
    ((lambda: torch.nn.Conv2d(40, 6, 3, groups=2), (1, 40, 4, 5)), "20 channels a group: not whole blocks"),
    ((lambda: torch.nn.Conv2d(16, 8, 5), (1, 16, 6, 7)), "7 padded rows an output (_SHIFTED_WASTE)"),
    ((lambda: torch.nn.Conv2d(16, 8, 3, padding=1), (1, 16, 30, 30)), "a box of 512 rows: TMA's boxes end at 256"),
])
def test_where_no_box_fits_the_taps_kernel_runs_instead(library, case, why, monkeypatch):
    module_, _ = library
    monkeypatch.setitem(module_.__dict__, "_conv_shifted_kernel", None)  # not called
    out, expected = _run(library, *case, block_m=512 if "512" in why else 16)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4, msg=why)


def test_a_triton_without_tensor_descriptors_gathers(library, monkeypatch):
    module_, _ = library
    monkeypatch.setitem(module_.__dict__, "_tensor_descriptor", lambda: None)  # before Triton 3.4
    monkeypatch.setitem(module_.__dict__, "_conv_shifted_kernel", None)
    monkeypatch.setitem(module_.__dict__, "_SHIFTED_WASTE", float("inf"))
    out, expected = _run(library, *CASES[0])
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def test_the_padded_copy_stays_whole_at_any_tile_the_search_gives_it(tmp_path, monkeypatch):
    # the copy's BLOCK_C and BLOCK_S are tunables to the search (the second pair in the library:
    # the channels-last copy's come first); its grid follows them, so every position of the buffer
    # is written whatever they become: a border left unwritten would be summed into its outputs
    text = conv_library.seed_text()
    header = conv_library.module_text()[:-len(text)]
    copy = [t for t in find_tunables(text) if t.name in ("BLOCK_C", "BLOCK_S")][2:]
    assert [t.name for t in copy] == ["BLOCK_C", "BLOCK_S"]
    assert text.rfind("_padded_copy_kernel[", 0, copy[0].start) > text.rfind("_channels_last_kernel[", 0, copy[0].start)
    path = tmp_path / "conv_padded_moved.py"
    path.write_text(header + with_values(text, {copy[0]: 8, copy[1]: 16}))
    moved = _load(path, "conv_padded_moved")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(2, 12, 3, 5, device=device)
    buffer = torch.full((1, 2 * 6 * 7, 12), float("nan"), device=device)  # lead 1 and 2, trail 2 and 0
    grid = (-(-6 * 7 // 16), -(-12 // 8), 2)
    moved._padded_copy_kernel[grid](x, buffer, 12, 1, 3, 5, 1, 6, 7, 0, 1, 2, *moved._layout(x),
                                    BLOCK_C=8, BLOCK_S=16)
    expected = torch.zeros(2, 12, 6, 7, device=device)
    expected[:, :, 1:4, 2:7] = x
    assert torch.equal(buffer.reshape(2, 6, 7, 12).movedim(-1, 1), expected)
    monkeypatch.setitem(moved.__dict__, "_SHIFTED_WASTE", float("inf"))
    monkeypatch.setitem(moved.__dict__, "_conv_taps_kernel", None)
    out, reference = _run((moved, device), *CASES[0])
    torch.testing.assert_close(out, reference, atol=1e-4, rtol=1e-4)


def test_shifted_windows_store_in_the_layout_the_compiled_graph_states(library, monkeypatch):
    # inductor's wrapper may expect a channels-last output (out_size, out_stride): the store follows it
    module_, device = library
    monkeypatch.setitem(module_.__dict__, "_conv_taps_kernel", None)
    monkeypatch.setitem(module_.__dict__, "_SHIFTED_WASTE", float("inf"))
    torch.manual_seed(0)
    module = torch.nn.Conv2d(16, 8, 3, padding=1).to(device)
    x = torch.randn(2, 16, 6, 7, device=device)
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        expected = module(x)
    stride = expected.contiguous(memory_format=torch.channels_last).stride()
    out = module_._convolution(x, module.weight.detach(), module.bias.detach(), module.stride, module.padding,
                               module.dilation, False, (0,), 1, out_size=expected.shape, out_stride=stride,
                               block_m=16, block_n=16, block_k=16, channels_last=True, shifted=True)
    assert out.stride() == stride
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)

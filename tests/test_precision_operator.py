"""The dot-precision operator: fp32 dots onto tensor cores, split precision under any tolerance,
plain TF32 only under the kernelbench tolerance."""
import numpy as np
import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evo.core.program import Program
from operators import Context
from operators.precision import DotPrecision, with_precision

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(32, 64), torch.randn(64, 16)]


def get_init_inputs():
    return []
'''

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

NUM_WARPS = 4


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    m = tl.arange(0, M)
    n = tl.arange(0, N)
    k = tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    acc = tl.dot(a, tl.trans(tl.trans(b)), input_precision="ieee")
    tl.store(c_ptr + m[:, None] * N + n[None, :], acc + tl.dot(a * 0.0, b))


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        _matmul[(1,)](a, b, c, M=a.shape[0], N=b.shape[1], K=a.shape[1], num_warps=NUM_WARPS)
        return c
'''

TEMPLATE_DOT = "acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)"


@pytest.fixture
def gpu_triton(monkeypatch):
    """The split precisions as Triton 3.6 compiles them for an NVIDIA GPU (its interpreter has tf32x3 only)."""
    from evo.core import dot_precision
    from operators import precision

    for module in (dot_precision, precision):
        monkeypatch.setattr(module, "split_precisions", lambda: dot_precision.SPLIT_PRECISIONS)


def _context(source: str) -> Context:
    parent = Program(id=1, task="mm", island=0, generation=0, operator="seed", source=source)
    return Context(task_name="mm", task_source=TASK, parent=parent)


def test_every_dot_with_a_precision_argument_moves_and_a_dot_without_one_stays():
    child = with_precision(KERNEL, "tf32x3")
    assert 'tl.dot(a, tl.trans(tl.trans(b)), input_precision="tf32x3")' in child  # brackets inside matched
    assert "tl.dot(a * 0.0, b))" in child  # Triton's default (TF32) left alone
    assert with_precision(TEMPLATE_DOT, "tf32x3") == \
        'acc += tl.dot(a, b, input_precision="tf32x3", out_dtype=ACC_TYPE)'
    assert with_precision(child, "tf32x3") is None  # nothing left to change
    assert with_precision("x = allow_tf32=True", "tf32x3") is None  # not inside a dot


def test_strict_offers_split_precision_only_and_kernelbench_offers_plain_tf32_too(gpu_triton):
    strict, loose = DotPrecision(tolerance="strict"), DotPrecision(tolerance="kernelbench")
    seen = {loose.propose(_context(KERNEL), np.random.default_rng(seed)).note for seed in range(40)}
    assert seen == {"dots ieee -> tf32x3", "dots ieee -> bf16x6", "dots ieee -> bf16x3", "dots ieee -> tf32"}
    moved = {strict.propose(_context(KERNEL), np.random.default_rng(seed)).note for seed in range(40)}
    assert moved == {"dots ieee -> tf32x3", "dots ieee -> bf16x6", "dots ieee -> bf16x3"}
    # a split parent may move to another split precision (level1/1: 2.2x compile's time in tf32x3,
    # 0.78x in bf16x6), under strict never to plain TF32
    split = Program(id=2, task="mm", island=0, generation=1, operator="dot_precision",
                    source=with_precision(KERNEL, "tf32x3"))
    assert strict.applies_to(split) and loose.applies_to(split)
    moved = {strict.propose(_context(split.source), np.random.default_rng(seed)).note for seed in range(20)}
    assert moved == {"dots tf32x3 -> bf16x6", "dots tf32x3 -> bf16x3"}
    # a TF32 parent (a kernelbench seed's convolution starts there) is never moved back to split precision
    plain = Program(id=4, task="mm", island=0, generation=0, operator="seed", source=with_precision(KERNEL, "tf32"))
    assert not loose.applies_to(plain) and not strict.applies_to(plain)
    assert loose.propose(_context(plain.source), np.random.default_rng(0)).source is None
    elementwise = Program(id=3, task="mm", island=0, generation=0, operator="seed", source="x = 1\n")
    assert not strict.applies_to(elementwise) and not loose.applies_to(elementwise)
    with pytest.raises(ValueError, match="strict or kernelbench"):
        DotPrecision(tolerance="loose")


def test_only_the_split_precisions_this_triton_compiles_are_offered(monkeypatch):
    from evo.core import dot_precision
    from operators import precision

    monkeypatch.setattr(precision, "split_precisions", lambda: ("tf32x3",))  # a Triton before bf16x6
    strict = DotPrecision(tolerance="strict")
    assert {strict.propose(_context(KERNEL), np.random.default_rng(seed)).note for seed in range(10)} == \
        {"dots ieee -> tf32x3"}
    assert not strict.applies_to(Program(id=2, task="mm", island=0, generation=1, operator="dot_precision",
                                         source=with_precision(KERNEL, "tf32x3")))
    # read from the backend's options: here Triton's interpreter, which compiles tf32x3 only
    assert dot_precision.split_precisions() == ("tf32x3",)


def test_a_split_precision_child_of_a_large_tile_gets_more_warps_and_a_tf32_child_does_not():
    # a GEMM template's tile as a seed carries it: 128 x 128 in four warps is 128 accumulator floats
    # a thread, which spilled under tf32x3 in the records; eight warps hold 64
    template = ("K0_BLOCK_M = 128\nK0_BLOCK_N = 128\nK0_GROUP_M = 8\nK0_NUM_WARPS = 4\nK0_NUM_STAGES = 3\n"
                "K1_BLOCK_M = 64\nK1_BLOCK_N = 32\nK1_NUM_WARPS = 4\n" + TEMPLATE_DOT + "\n")
    loose = DotPrecision(tolerance="kernelbench")
    children = {p.note: p.source for p in (loose.propose(_context(template), np.random.default_rng(seed))
                                           for seed in range(12))}
    split = children["dots allow_tf32 -> tf32x3 (K0_NUM_WARPS 4->8: at most 64 accumulator floats a thread)"]
    assert "K0_NUM_WARPS = 8\n" in split and "K1_NUM_WARPS = 4\n" in split  # 64 x 32: 16 a thread
    plain = children["dots allow_tf32 -> tf32"]
    assert "K0_NUM_WARPS = 4\n" in plain
    wide = template.replace("K0_BLOCK_N = 128", "K0_BLOCK_N = 256")
    assert "K0_NUM_WARPS = 16\n" in DotPrecision().propose(_context(wide), np.random.default_rng(0)).source


@pytest.mark.slow
def test_a_split_precision_child_runs_and_is_checked_like_any_child():
    # Under Triton's interpreter the precision changes nothing: this checks that the child runs.
    child = DotPrecision().propose(_context(KERNEL), np.random.default_rng(0)).source
    evaluator = Evaluator(EvaluatorSettings(device="cpu", timeout_s=120), "cpu")
    try:
        result = evaluator.evaluate("mm", TASK, child)
    finally:
        evaluator.close()
    assert result.status is Status.CORRECT, (result.reason, result.error)


def test_an_island_draws_only_operators_that_can_change_the_parent():
    from islands.island import Island
    from operators import TunableConstantMutation

    island = Island(0, [DotPrecision(), TunableConstantMutation()], [100.0, 1.0], seed=1)
    assert {island.propose(_context("NUM_WARPS = 4\n")).operator for _ in range(20)} == {"constants"}
    assert {island.propose(_context(KERNEL)).operator for _ in range(20)} >= {"dot_precision"}
    alone = Island(0, [DotPrecision()], [1.0], seed=1)
    assert alone.propose(_context("x = 1\n")).note == "no enabled operator can change this parent"


def test_strict_runs_exact_fp32_and_kernelbench_runs_pytorchs_defaults():
    """Under the kernelbench tolerance, references, eager and torch.compile run as users and
    KernelBench's harness run them: cuDNN's convolutions in TF32 (PyTorch's default); strict keeps
    every fp32 product exact."""
    import torch

    from evaluator.fp32_precision import precision_for
    from evaluator.settings import TOLERANCES

    from evaluator.harness import handle

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        precision_for(TOLERANCES["kernelbench"])
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, True)
        precision_for(TOLERANCES["strict"])
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, False)
        # a worker sets it from each request's tolerance before it runs the request
        with pytest.raises(ValueError, match="unknown request kind"):
            handle({"kind": "no_such_kind", "device": "cuda", "tolerance": TOLERANCES["kernelbench"]})
        assert torch.backends.cudnn.allow_tf32 is True
        with pytest.raises(ValueError, match="unknown request kind"):
            handle({"kind": "no_such_kind", "device": "cuda", "tolerance": TOLERANCES["strict"]})
        assert torch.backends.cudnn.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_a_derived_gemm_seed_starts_on_tensor_cores_with_its_exact_self_behind_it(gpu_triton):
    from evo.core.dot_precision import SPLIT_PRECISIONS, seed_kernels

    template = ("K0_BLOCK_M = 128\nK0_BLOCK_N = 128\nK0_NUM_WARPS = 4\n" + TEMPLATE_DOT + "\n")
    *twins, exact = seed_kernels(template, "strict")
    assert exact == template  # the derived seed, in case the twins miss the checks
    assert len(twins) == 3  # one in each split precision this Triton compiles
    for twin, precision in zip(twins, SPLIT_PRECISIONS):
        assert f'input_precision="{precision}"' in twin and "K0_NUM_WARPS = 8\n" in twin  # split: more warps
        assert twin.startswith(f"# The seed derived from torch.compile with every dot in {precision}\n")  # it says so
    first, exact = seed_kernels(template, "kernelbench")
    assert 'input_precision="tf32"' in first and "K0_NUM_WARPS = 4\n" in first and exact == template
    # only inductor's GEMM templates (allow_tf32 flags): the engine's own convolution and elementwise seeds stay one
    assert seed_kernels(KERNEL, "strict") == (KERNEL,)
    assert seed_kernels("x = 1\n", "kernelbench") == ("x = 1\n",)


def _convolution_seed(weight: str, stride: int) -> str:
    # a strict seed's convolution as conv_seed writes it: its constants, launcher and the library's dots
    from evaluator.conv_seed import CONV_LIBRARY, replace_convolutions

    lines = [f"assert_size_stride(arg0_1, {weight}, (1, 1, 1, 1))",
             f"buf0 = extern_kernels.convolution(arg1_1, arg0_1, stride=({stride}, {stride}), padding=(1, 1), "
             "dilation=(1, 1), transposed=False, output_padding=(0, 0), groups=1, bias=None)"]
    out, constants, launchers = replace_convolutions(lines, 0, "ieee")
    return "\n".join(constants + [CONV_LIBRARY] + launchers + out) + "\n"


def test_a_strict_convolution_seed_on_the_taps_loop_starts_in_split_precision_gathering_channels_last():
    from evo.core.dot_precision import dot_arguments, seed_kernels

    seed = _convolution_seed("(64, 32, 3, 3)", 1)  # 32 channels: the taps loop first, NCHW in exact fp32
    assert "K0_USE_TAPS_LOOP = 1\nK0_USE_CHANNELS_LAST = 0\nK0_USE_SPLIT_TF32 = 0\nK0_USE_SHIFTED_WINDOWS = 0\n" in seed
    assert ("channels_last=K0_USE_CHANNELS_LAST == 1, split=K0_USE_SPLIT_TF32 == 1, "
            "shifted=K0_USE_SHIFTED_WINDOWS == 1)") in seed
    first, exact = seed_kernels(seed, "strict")
    assert exact == seed
    # the operands split as they are copied; the dots in tf32x3 where the search turns that off
    assert {m.group(2) for m in dot_arguments(first)} == {"tf32x3"}
    # at stride 1, over shifted windows of a padded copy (evaluator/conv_shifted.py)
    assert "K0_USE_TAPS_LOOP = 1\nK0_USE_CHANNELS_LAST = 1\nK0_USE_SPLIT_TF32 = 1\nK0_USE_SHIFTED_WINDOWS = 1\n" in first
    assert "K0_NUM_WARPS = 4\n" in first
    # 64 outputs: its steps of 16 channels widened to 32 (split over shifted windows ran 2-3x slower at 16)
    assert "K0_BLOCK_N = 64\nK0_BLOCK_K = 16\n" in seed and "K0_BLOCK_N = 64\nK0_BLOCK_K = 32\n" in first
    wide = _convolution_seed("(128, 32, 3, 3)", 1)  # 128 outputs: the wide tile keeps its 16
    assert "K0_BLOCK_N = 128\nK0_BLOCK_K = 16\n" in seed_kernels(wide, "strict")[0]
    narrow = seed_kernels(_convolution_seed("(32, 32, 3, 3)", 1), "strict")[0]  # 32 outputs: no windows
    assert "K0_USE_SPLIT_TF32 = 1\nK0_USE_SHIFTED_WINDOWS = 0\n" in narrow
    assert first.startswith("# The seed derived from torch.compile with every dot in tf32x3,\n# the convolutions "
                            "gathering channels-last (shifted windows at stride 1 from 64 outputs), three TF32 products of "
                            "operands split")
    strided = _convolution_seed("(64, 32, 3, 3)", 2)  # with a stride: no shifted windows to switch on
    assert "USE_SHIFTED_WINDOWS" not in strided and "K0_USE_SPLIT_TF32 = 1\n" in seed_kernels(strided, "strict")[0]
    # under the kernelbench tolerance a convolution seed is derived in TF32, channels-last, already
    assert seed_kernels(seed, "kernelbench") == (seed,)
    # 8 channels at stride 1: the general loop first, which neither change speeds up (section 17, s45's probe)
    general = _convolution_seed("(64, 8, 3, 3)", 1)
    assert "K0_USE_TAPS_LOOP = 0" in general and seed_kernels(general, "strict") == (general,)

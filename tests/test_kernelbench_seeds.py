"""Seeds for KernelBench-style problem files (tests/data/kernelbench_like/, written for these tests):
the reference class copied under its new name whatever the idiom, the Triton convolution that
replaces cuDNN, the capture's rewrites; inductor's output for each problem
file was captured on an H100 (tests/data/kernelbench_like/inductor/)."""
import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from evaluator import Evaluator, EvaluatorSettings, Preparation, Status
from evaluator.compile_seed import NoSeed, seed_from_inductor
from evaluator.conv_seed import replace_convolutions
from evaluator.conv_launch import _convolution
from evaluator.fp32_precision import convolution_precision
from evaluator.reference_source import NotAModel, forward_signature, reference_class
from evaluator.seed_capture import _avg_pool_by_slices
from evo.core.kernel_source import find_tunables

DATA = Path(__file__).parent / "data" / "kernelbench_like"
GRAPH_INPUTS = json.loads((DATA / "inductor" / "graph_inputs.json").read_text())


def problem(name: str) -> str:
    return (DATA / f"{name}.py").read_text()


def seed(name: str) -> str:
    return seed_from_inductor((DATA / "inductor" / f"{name}.py.txt").read_text(), GRAPH_INPUTS[name], problem(name))


# --- the reference class ---


def test_old_style_super_and_class_attributes_follow_the_rename():
    source, params = reference_class(problem("conv2d_relu_bias"))
    assert params == ["x"]
    assert "super(_Reference, self).__init__()" in source and "_Reference.SCALE * OFFSET" in source
    assert "Model" not in source and "def forward" not in source
    assert "OFFSET = 2.0" in source  # defined after the class in the problem file, read by __init__
    assert "batch_size" not in source and "in_channels = 3" not in source  # parameters, not module names


def test_the_copied_class_builds_the_same_module():
    namespace: dict = {}
    exec(problem("conv2d_relu_bias"), namespace)
    copy: dict = {}
    exec(reference_class(problem("conv2d_relu_bias"))[0], copy)
    torch.manual_seed(0)
    original = namespace["Model"](*namespace["get_init_inputs"]())
    torch.manual_seed(0)
    renamed = copy["_Reference"](*namespace["get_init_inputs"]())
    assert renamed.scale == original.scale == 1.0
    assert all(torch.equal(a, b) for a, b in zip(original.state_dict().values(), renamed.state_dict().values()))


def test_helpers_come_along_transitively_and_forward_only_names_do_not():
    task = '''import torch
import torch.nn as nn
import math as m

def width():
    return WIDTH * 2

class Block(nn.Module):
    def __init__(self):
        super(Block, self).__init__()
        self.lin = nn.Linear(width(), width())

class Model(nn.Module):
    """Über-model: non-ASCII text before a rename on the same line."""
    def __init__(self):
        super(Model, self).__init__(); self.block = Block(); self.kind = Model.__name__

    def forward(self, x):
        return helper(self.block.lin(x)) * m.pi

def helper(x):
    return x

WIDTH = 4
def get_inputs():
    return [torch.rand(2, 8)]
def get_init_inputs():
    return []
'''
    source, _ = reference_class(task)
    assert "def width()" in source and "class Block" in source and "WIDTH = 4" in source
    assert "def helper" not in source and "import math" not in source
    assert "super(_Reference, self).__init__(); self.block = Block(); self.kind = _Reference.__name__" in source
    assert "super(Block, self)" in source
    namespace: dict = {}
    exec(source, namespace)
    assert namespace["_Reference"]().block.lin.in_features == 8


def test_forward_keeps_its_defaults_and_keyword_only_parameters():
    # As KernelBench's NetVLAD (forward(self, x, mask=None)) and Mamba2 (initial_states=None): the
    # harness calls forward with get_inputs() alone, so the seed's forward needs the same defaults.
    task = """import torch
from typing import Optional
SCALE = 3

class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, *, scale: int = SCALE):
        return x * scale
"""
    source, params = reference_class(task)
    assert params == ["x", "mask", "scale"]
    assert "SCALE = 3" in source  # a default's module-level name comes along
    assert forward_signature(task) == "self, x, mask=None, *, scale=SCALE"


def test_a_file_without_a_usable_model_is_refused():
    with pytest.raises(NotAModel, match="no class Model"):
        reference_class("import torch\nclass Net:\n    pass\n")
    with pytest.raises(NotAModel, match="named arguments"):
        reference_class("class Model:\n    def forward(self, *xs):\n        return xs\n")


# --- the Triton convolution ---

CONVOLUTIONS = [  # dims, N, C, O, spatial, kernel, stride, padding, dilation, groups, transposed, output padding
    (1, 2, 4, 6, (13,), (3,), (3,), (1,), (4,), 2, False, (0,)),
    (2, 2, 3, 5, (9, 11), (3, 2), (2, 1), (1, 0), (1, 2), 1, False, (0, 0)),
    (2, 2, 4, 4, (9, 8), (3, 3), (1, 1), (1, 1), (1, 1), 4, False, (0, 0)),  # depthwise
    (3, 1, 3, 4, (5, 6, 7), (3, 2, 3), (1, 2, 1), (0, 1, 1), (1, 1, 2), 1, False, (0, 0, 0)),
    (1, 2, 4, 6, (7,), (3,), (2,), (1,), (2,), 1, True, (1,)),
    (2, 2, 4, 6, (5, 6), (3, 5), (2, 3), (1, 2), (2, 1), 2, True, (1, 0)),
    (3, 1, 4, 4, (3, 4, 5), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), 2, True, (1, 0, 1)),
]


@pytest.mark.parametrize("case", CONVOLUTIONS, ids=lambda c: f"{c[0]}d{'-transposed' if c[10] else ''}-g{c[9]}")
@pytest.mark.slow
def test_the_triton_convolution_matches_pytorch(case):
    dims, n, c, o, spatial, kernel, stride, padding, dilation, groups, transposed, output_padding = case
    torch.manual_seed(0)
    x = torch.randn(n, c, *spatial)
    w = torch.randn(c, o // groups, *kernel) if transposed else torch.randn(o, c // groups, *kernel)
    bias = torch.randn(o)
    if transposed:
        expected = getattr(F, f"conv_transpose{dims}d")(x, w, bias, stride, padding, output_padding, groups, dilation)
    else:
        expected = getattr(F, f"conv{dims}d")(x, w, bias, stride, padding, dilation, groups)
    out = _convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups,
                       block_m=16, block_n=16, block_k=16)
    assert out.shape == expected.shape and out.is_contiguous()
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def test_the_triton_convolution_writes_the_layout_the_graph_expects():
    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3)
    out = _convolution(x, w, None, (1, 1), (0, 0), (1, 1), False, (0, 0), 1, out_size=(2, 4, 4, 4),
                       out_stride=(64, 1, 16, 4), block_m=16, block_n=16, block_k=16)
    assert out.stride() == (64, 1, 16, 4)
    torch.testing.assert_close(out, F.conv2d(x, w), atol=1e-4, rtol=1e-4)


def test_calls_into_cudnn_become_triton_launches_with_their_own_tunables():
    lines = ["buf0 = extern_kernels.convolution(arg5_1, arg0_1, stride=(2, 2), padding=(1, 1), dilation=(1, 1), "
             "transposed=False, output_padding=(0, 0), groups=4, bias=None)",
             "assert_size_stride(buf0, (s0, 8, 5, 6), (240, 30, 6, 1), 'torch.ops.aten.convolution.default')",
             "del arg5_1"]
    out, constants, launchers = replace_convolutions(lines, 3)
    assert out[0] == ("buf0 = _launch_3(arg5_1, arg0_1, stride=(2, 2), padding=(1, 1), dilation=(1, 1), "
                      "transposed=False, output_padding=(0, 0), groups=4, bias=None, out_size=(s0, 8, 5, 6), "
                      "out_stride=(240, 30, 6, 1))")
    assert "K3_BLOCK_N = 16" in constants[0]  # grouped: few output channels per group
    assert launchers[0].startswith("def _launch_3(*args, **kwargs):") and out[1:] == lines[1:]


def test_library_calls_other_than_convolutions_give_no_seed():
    code = (DATA / "inductor" / "conv2d_relu_bias.py.txt").read_text()
    with pytest.raises(NoSeed, match=r"calls extern_kernels\.mm besides Triton"):
        seed_from_inductor(code.replace("extern_kernels.convolution(", "extern_kernels.mm("),
                           GRAPH_INPUTS["conv2d_relu_bias"], problem("conv2d_relu_bias"))


# --- seeds from the captured compilations ---


@pytest.mark.parametrize("name", sorted(GRAPH_INPUTS))
def test_every_idiom_becomes_a_plain_seed(name):
    source = seed(name)
    compile(source, name, "exec")
    assert "class ModelNew(_Reference)" in source and "\nclass Model(" not in source
    assert "super(Model" not in source and "extern_kernels" not in source and "triton_heuristics." not in source
    kinds = {t.kind for t in find_tunables(source)}
    assert "warps" in kinds and kinds & {"block", "grid"}


def test_convolution_sites_and_scan_helpers_are_numbered_apart():
    conv = seed("conv_transpose3d_grouped")
    assert "def _conv_kernel(" in conv and "K0_BLOCK_M = 64" not in conv
    sites = [t.name for t in find_tunables(conv) if t.name.endswith("_BLOCK_M")]
    assert sites and all(f"block_m={s}" in conv for s in sites)
    scan = seed("attention_cumsum")  # a cumulative sum's combine function, renamed for its kernel
    helper = re.search(r"def (_k\d+_triton_helper_fn_add0)\(", scan)
    assert helper and f"tl.associative_scan((tmp2,), 1, {helper.group(1)})" in scan


def test_a_convolutions_products_start_in_the_precision_cudnn_runs_in_for_the_tolerance():
    """Strict: exact fp32, as the strict references run; KernelBench's tolerance: TF32, as cuDNN runs
    convolutions in PyTorch's defaults (evaluator.fp32_precision)."""
    assert convolution_precision(None) == "ieee" and convolution_precision(1e-2) == "tf32"
    name = "conv_transpose3d_grouped"
    code, inputs = (DATA / "inductor" / f"{name}.py.txt").read_text(), GRAPH_INPUTS[name]
    exact = seed_from_inductor(code, inputs, problem(name))
    tf32 = seed_from_inductor(code, inputs, problem(name), conv_precision="tf32")
    assert 'input_precision="ieee"' in exact and 'input_precision="tf32"' not in exact
    assert 'input_precision="tf32"' in tf32 and 'input_precision="ieee"' not in tf32
    # nothing else differs but the switch to split operands (exact products only: evo.core.dot_precision)
    unsplit = re.sub(r", split=K\d+_USE_SPLIT_TF32 == 1|\nK\d+_USE_SPLIT_TF32 = 0", "", exact)
    assert unsplit != exact and "USE_SPLIT_TF32" not in tf32
    assert tf32.replace('input_precision="tf32"', 'input_precision="ieee"') == unsplit


@pytest.fixture(scope="module")
def cpu_evaluator():
    ev = Evaluator(EvaluatorSettings(device="cpu", timeout_s=300), "cpu")
    yield ev
    ev.close()


@pytest.mark.parametrize("name", ["conv2d_relu_bias", "conv1d_depthwise_loop", "conv_transpose3d_grouped"])
@pytest.mark.slow
def test_convolution_seeds_are_correct_under_the_interpreter(cpu_evaluator, name):
    # The other idioms' seeds use libdevice or tl.dot templates, which Triton's interpreter runs
    # too slowly or not at all: the GPU test below checks them.
    result = cpu_evaluator.evaluate(name, problem(name), seed(name))
    assert result.status is Status.CORRECT, (result.reason, result.error)


# --- the capture's rewrites ---


def test_large_average_pools_become_strided_slices():
    x = torch.rand(2, 3, 9, 8, 7)
    torch.testing.assert_close(_avg_pool_by_slices(x, [3, 3, 3], [2, 2, 2], [1, 1, 1]), F.avg_pool3d(x, 3, 2, 1))
    x2 = torch.rand(2, 3, 12, 11)
    torch.testing.assert_close(_avg_pool_by_slices(x2, [5, 6], [2, 3], [2, 0], divisor_override=7),
                               F.avg_pool2d(x2, (5, 6), (2, 3), (2, 0), divisor_override=7))
    # What inductor lowers to Triton itself, or what the slices do not cover, is left alone.
    assert _avg_pool_by_slices(x, [2, 2, 2], [2, 2, 2], [0, 0, 0]) is NotImplemented
    assert _avg_pool_by_slices(x, [3, 3, 3], [3, 3, 3], [0, 0, 0]) is NotImplemented
    assert _avg_pool_by_slices(x, [3, 3, 3], [2, 2, 2], [1, 1, 1], ceil_mode=True) is NotImplemented


# --- on a GPU ---


@pytest.mark.gpu
def test_every_idiom_gets_a_correct_seed_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    names = sorted(p.stem for p in DATA.glob("*.py"))
    evaluator = Evaluator(EvaluatorSettings(device="cuda", timeout_s=300), "cuda", 0)
    try:
        outcomes = evaluator.prepare([Preparation(n, problem(n), True) for n in names], parallel=4)
        failures = {n: (o.check.error, o.seed and o.seed.error) for n, o in outcomes.items()
                    if not (o.seed and o.seed.ok)}
        assert not failures
        results = {n: evaluator.evaluate(n, problem(n), outcomes[n].seed.source) for n in names}
    finally:
        evaluator.close()
    wrong = {n: r.reason for n, r in results.items() if r.status is not Status.CORRECT}
    assert not wrong

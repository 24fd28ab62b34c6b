"""The persistent-reduction operator: a looped reduction (inductor's ``triton_red_*`` form) whose
row fits one block made one pass over a block pinned in the kernel."""
import ast

import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evo.core.kernel_source import find_tunables
from evo.core.program import Program
from operators.persistent_reduction import PersistentReduction
from tests.support.modules import run_compiled
from tests.support.proposals import ELEMENTWISE, as_seed, child_of

_HEADER = '''import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers

'''


def _task(forward: str, shape: tuple[int, int]) -> str:
    return f'''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return {forward}


def get_inputs():
    return [torch.randn{shape}]


def get_init_inputs():
    return []
'''


def _model(launch: str, out: str) -> str:
    return f'''

class ModelNew(nn.Module):
    def forward(self, x):
        out = {out}
        {launch}
        return out
'''


# Rows of 300 (not a power of two): a two-loop log-softmax, an online max and sum, then the write
# (inductor's online_softmax_combine written out: its exp helper fails in Triton's interpreter;
# tl.max, not max2: the interpreter runs tl.reduce's combine in Python, a second a call).
# 18 rows, 4 a program: the last program's xmask matters; blocks of 64: the last r0 block is partial.
LOG_SOFTMAX_TASK = _task("torch.log_softmax(x, dim=1)", (18, 300))
LOG_SOFTMAX = _HEADER + '''K0_ROWS_PER_PROGRAM = 4
K0_BLOCK_R0 = 64
K0_NUM_WARPS = 4
K0_NUM_STAGES = 1


@triton.jit
def triton_red_fused__log_softmax_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 18
    r0_numel = 300
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp2_max = tl.full([XBLOCK, R0_BLOCK], float('-inf'), tl.float32)
    _tmp2_sum = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 300*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        _tmp2_max_next = triton_helpers.maximum(_tmp2_max, tmp1)
        _tmp2_sum_next = _tmp2_sum * tl.exp(_tmp2_max - _tmp2_max_next) + tl.exp(tmp1 - _tmp2_max_next)
        _tmp2_max = tl.where(r0_mask & xmask, _tmp2_max_next, _tmp2_max)
        _tmp2_sum = tl.where(r0_mask & xmask, _tmp2_sum_next, _tmp2_sum)
    tmp2 = tl.max(_tmp2_max, 1)[:, None]
    tmp3 = tl.sum(_tmp2_sum * tl.exp(tl.where(_tmp2_max == float('-inf'), 0.0, _tmp2_max - tmp2)), 1)[:, None]
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp4 = tl.load(in_ptr0 + (r0_1 + 300*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp5 = tmp4 - tmp2
        tmp6 = tl.log(tmp3)
        tmp7 = tmp5 - tmp6
        tl.store(out_ptr0 + (r0_1 + 300*x0), tmp7, r0_mask & xmask)


def _launch_0(in_ptr0, out_ptr0, xnumel, r0_numel):
    grid = (triton.cdiv(xnumel, K0_ROWS_PER_PROGRAM), 1, 1,)
    triton_red_fused__log_softmax_0[grid](in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK=K0_ROWS_PER_PROGRAM, R0_BLOCK=K0_BLOCK_R0, num_warps=K0_NUM_WARPS, num_stages=K0_NUM_STAGES)
''' + _model("_launch_0(x, out, 18, 300)", "torch.empty_like(x)")

# Rows of 100: mean and (biased) variance by one loop of welford, as inductor's var_mean.
MEAN_VAR_TASK = _task("torch.stack((x.mean(1), x.var(1, unbiased=False)), 1)", (10, 100))
MEAN_VAR = _HEADER + '''K0_ROWS_PER_PROGRAM = 4
K0_BLOCK_R0 = 32  # rows walked 32 at a time
K0_NUM_WARPS = 4
K0_NUM_STAGES = 1


@triton.jit
def triton_red_fused_var_mean_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 10
    r0_numel = 100
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    tmp2_mean = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp2_m2 = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp2_weight = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 100*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp2_mean_next, tmp2_m2_next, tmp2_weight_next = triton_helpers.welford_reduce(
            tmp1, tmp2_mean, tmp2_m2, tmp2_weight, roffset == 0
        )
        tmp2_mean = tl.where(r0_mask & xmask, tmp2_mean_next, tmp2_mean)
        tmp2_m2 = tl.where(r0_mask & xmask, tmp2_m2_next, tmp2_m2)
        tmp2_weight = tl.where(r0_mask & xmask, tmp2_weight_next, tmp2_weight)
    tmp5, tmp6, tmp7 = triton_helpers.welford(tmp2_mean, tmp2_m2, tmp2_weight, 1)
    tmp2 = tmp5[:, None]
    tmp3 = tmp6[:, None]
    tmp8 = tmp3 / 100.0
    tl.store(out_ptr0 + (2*x0), tmp2, xmask)
    tl.store(out_ptr0 + (1 + 2*x0), tmp8, xmask)


def _launch_0(in_ptr0, out_ptr0, xnumel, r0_numel):
    grid = (triton.cdiv(xnumel, K0_ROWS_PER_PROGRAM), 1, 1,)
    triton_red_fused_var_mean_0[grid](in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK=K0_ROWS_PER_PROGRAM,
                                      R0_BLOCK=K0_BLOCK_R0, num_warps=K0_NUM_WARPS, num_stages=K0_NUM_STAGES)
''' + _model("_launch_0(x, out, 10, 100)", "torch.empty((10, 2), device=x.device)")

# Rows of 256, a power of two: the block divided the row, so inductor's mask is all true.
SUM_SQUARES_TASK = _task("(x * x).sum(1)", (6, 256))
SUM_SQUARES = _HEADER + '''K0_ROWS_PER_PROGRAM = 4
K0_BLOCK_R0 = 64
K0_NUM_WARPS = 4
K0_NUM_STAGES = 1


@triton.jit
def triton_red_fused_mul_sum_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 6
    r0_numel = 256
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp3 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 256*x0), xmask, eviction_policy='evict_first', other=0.0)
        tmp1 = tmp0 * tmp0
        tmp2 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
        tmp4 = _tmp3 + tmp2
        _tmp3 = tl.where(xmask, tmp4, _tmp3)
    tmp3 = tl.sum(_tmp3, 1)[:, None]
    tl.store(out_ptr0 + (x0), tmp3, xmask)


def _launch_0(in_ptr0, out_ptr0, xnumel, r0_numel):
    grid = (triton.cdiv(xnumel, K0_ROWS_PER_PROGRAM), 1, 1,)
    triton_red_fused_mul_sum_0[grid](in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK=K0_ROWS_PER_PROGRAM, R0_BLOCK=K0_BLOCK_R0, num_warps=K0_NUM_WARPS, num_stages=K0_NUM_STAGES)
''' + _model("_launch_0(x, out, 6, 256)", "torch.empty((6,), device=x.device)")

_CASES = [("log_softmax", LOG_SOFTMAX_TASK, LOG_SOFTMAX), ("mean_var", MEAN_VAR_TASK, MEAN_VAR),
          ("sum_squares", SUM_SQUARES_TASK, SUM_SQUARES)]


def _program(source: str) -> Program:
    return as_seed(source, "reduction")


def _child(source: str, seed: int = 0, **kwargs):
    return child_of(PersistentReduction(**kwargs), source, task="reduction", task_source=LOG_SOFTMAX_TASK, seed=seed)


def _kernel(source: str) -> ast.FunctionDef:
    return next(f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef) and f.decorator_list)


def _launch(source: str) -> ast.Call:
    launcher = next(f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef) and f.name == "_launch_0")
    return next(n for n in ast.walk(launcher) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript))


@pytest.mark.parametrize("parent, loops, numel, block", [(LOG_SOFTMAX, 2, 300, 512), (MEAN_VAR, 1, 100, 128),
                                                         (SUM_SQUARES, 1, 256, 256)])
def test_a_looped_reduction_becomes_one_pass_over_a_block_pinned_in_the_kernel(parent, loops, numel, block):
    assert PersistentReduction().applies_to(_program(parent))
    proposal = _child(parent)
    kernel = _kernel(parent)
    assert proposal.note == f"{kernel.name}: r0_numel {numel} in one block, R0_BLOCK pinned to {block}"
    child = proposal.source
    new = _kernel(child)
    # no loop left; R0_BLOCK pinned first, no longer a parameter
    assert not any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(new))
    assert ast.unparse(new.body[0]) == f"R0_BLOCK: tl.constexpr = {block}"
    assert [a.arg for a in new.args.args] == [a.arg for a in kernel.args.args if a.arg != "R0_BLOCK"]
    # each loop is `r0_offset = 0` and its body, statement for statement, in its place
    flat = [ast.unparse(s) for s in new.body[1:]]
    old = []
    for s in kernel.body:
        old += (["r0_offset = 0"] + [ast.unparse(b) for b in s.body]) if isinstance(s, ast.For) else [ast.unparse(s)]
    assert flat == old and flat.count("r0_offset = 0") == loops
    # the launch no longer passes R0_BLOCK; the constant that fed it is gone, the others stay
    launch = _launch(child)
    assert [k.arg for k in launch.keywords] == ["XBLOCK", "num_warps", "num_stages"]
    assert "K0_BLOCK_R0" not in child and "R0_BLOCK=" not in child
    tunables = {t.name for t in find_tunables(child)}
    assert tunables == {"K0_ROWS_PER_PROGRAM", "K0_NUM_WARPS", "K0_NUM_STAGES"}
    assert {t.name for t in find_tunables(parent)} == tunables | {"K0_BLOCK_R0"}
    # persistent now: nothing left for the operator
    assert not PersistentReduction().applies_to(_program(child))


def test_a_constant_read_elsewhere_stays_and_a_literal_block_is_dropped():
    shared = LOG_SOFTMAX.replace("K0_NUM_STAGES = 1\n", "K0_NUM_STAGES = 1\n_CHUNK = K0_BLOCK_R0\n")
    child = _child(shared).source
    assert "K0_BLOCK_R0 = 64\n" in child and "R0_BLOCK=" not in child
    # a literal at the launch is a tunable of its own: it goes with the keyword
    literal = SUM_SQUARES.replace("R0_BLOCK=K0_BLOCK_R0", "R0_BLOCK=32")
    assert "R0_BLOCK" in [t.name for t in find_tunables(literal)]
    child = _child(literal).source
    assert "R0_BLOCK" not in [t.name for t in find_tunables(child)] and "R0_BLOCK=32" not in child
    assert "K0_BLOCK_R0 = 64\n" in child  # it fed no launch: not the operator's to remove
    assert ast.unparse(_kernel(child).body[0]) == "R0_BLOCK: tl.constexpr = 256"


def test_rows_beyond_one_block_unproven_masks_and_other_kernels_get_no_child():
    all_true = MEAN_VAR.replace("r0_mask = r0_index < r0_numel",
                                "r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]")
    inner_loop = SUM_SQUARES.replace("        tmp1 = tmp0 * tmp0\n", "        tmp1 = tmp0 * tmp0\n"
                                     "        for _i in tl.static_range(0, R0_BLOCK, 64):\n            tmp1 += 0\n")
    refused = {
        "r0_numel 300 is more than one block of at most 256": (LOG_SOFTMAX, 256),
        "r0_numel 100 is not a power of two and a loop's r0_mask is not computed": (all_true, 4096),
        "read or set beyond the loops' headers and masks": (MEAN_VAR.replace("tmp3 / 100.0", "tmp3 / rnumel"), 4096),
        "a loop over r0 other than": (inner_loop, 4096),
    }
    for reason, (source, max_block) in refused.items():
        assert not PersistentReduction(max_block=max_block).applies_to(_program(source))
        proposal = _child(source, max_block=max_block)
        assert proposal.source is None and reason in proposal.note, proposal.note
    # a power of two keeps an all-true mask: the child's block is the row
    assert PersistentReduction().applies_to(_program(SUM_SQUARES))
    # no looped reduction at all, or one made persistent already
    for source in (ELEMENTWISE, "x = 1\n", "def broken(:\n", _child(LOG_SOFTMAX).source):
        assert not PersistentReduction().applies_to(_program(source))
        proposal = _child(source)
        assert proposal.source is None and proposal.note.startswith("no looped reduction")
    with pytest.raises(ValueError, match="at least 1"):
        PersistentReduction(max_block=0)


@pytest.mark.slow
def test_parents_and_their_persistent_children_are_correct():
    evaluator = Evaluator(EvaluatorSettings(device="cpu", timeout_s=120), "cpu")
    try:
        for task, task_source, parent in _CASES:
            for source in (parent, _child(parent).source):
                result = evaluator.evaluate(task, task_source, source)
                assert result.status is Status.CORRECT, (task, result.reason, result.error)
    finally:
        evaluator.close()


@pytest.mark.gpu
def test_persistent_children_compile_and_are_correct_on_a_gpu(tmp_path):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for task, task_source, parent in _CASES:
        (tmp_path / f"task_{task}.py").write_text(task_source)
        (tmp_path / f"persistent_reduction_{task}.py").write_text(_child(parent).source)
        run_compiled(f"""
import torch
from tests.support.modules import load_module
reference = load_module({str(tmp_path / f"task_{task}.py")!r}, compiled=False)
module = load_module({str(tmp_path / f"persistent_reduction_{task}.py")!r})
x = reference.get_inputs()[0].cuda()
torch.testing.assert_close(module.ModelNew()(x), reference.Model()(x), atol=1e-4, rtol=1e-4)
""")
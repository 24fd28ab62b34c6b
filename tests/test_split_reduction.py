"""Operator split_reduction: a looped reduction's few long rows split across programs in two passes.
Parent and child run in Triton's interpreter on the CPU (compiled on a GPU)."""
import pytest
import torch

from evo.core.kernel_source import find_tunables
from operators.split_reduction import SplitReduction
from tests.support.modules import load_source
from tests.support.proposals import as_seed, child_of

# In Triton's interpreter on the CPU even where there is a GPU: the suite imports Triton interpreted, and a
# kernel compiled for the GPU in this process cannot call triton.language's own jit functions
# (tests/support/modules.py, run_compiled).
DEVICE = "cpu"
ROWS, ROW = 3, 1500

# inductor's looped reduction as it writes one: per row, a sum of squares (or a max) and a mean of
# it, then a second output from the same accumulator
SEED = '''import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers

K0_ROWS_PER_PROGRAM = 2
K0_BLOCK_R0 = 256
K0_NUM_WARPS = 4
K0_NUM_STAGES = 1


@triton.jit
def triton_red_fused_mean_pow_sum_0(in_ptr0, out_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = {rows}
    r0_numel = {row}
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp2 = tl.full([XBLOCK, R0_BLOCK], {init}, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = {mask}
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + {row}*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp1 = tmp0 * tmp0
        tmp3 = {update}
        _tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)
    tmp2 = {reduce}(_tmp2, 1)[:, None]
    tmp4 = {row}.0
    tmp5 = tmp2 / tmp4
    tl.store(out_ptr0 + (x0), tmp5, xmask)
    tl.store(out_ptr1 + (x0), tmp2, xmask)


def _launch_0(in_ptr0, out_ptr0, out_ptr1, xnumel, r0_numel):
    grid = (triton.cdiv(xnumel, K0_ROWS_PER_PROGRAM), 1, 1,)
    triton_red_fused_mean_pow_sum_0[grid](in_ptr0, out_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK=K0_ROWS_PER_PROGRAM, R0_BLOCK=K0_BLOCK_R0, num_warps=K0_NUM_WARPS, num_stages=K0_NUM_STAGES)


def _call(x):
    a = torch.empty(({rows},), device=x.device)
    b = torch.empty(({rows},), device=x.device)
    _launch_0(x, a, b, {rows}, {row})
    return a, b
'''
SUM = dict(init="0", update="_tmp2 + tmp1", reduce="tl.sum", mask="r0_index < r0_numel")
MAX = dict(init="float('-inf')", update="triton_helpers.maximum(_tmp2, tmp1)", reduce="triton_helpers.max2",
           mask="r0_index < r0_numel")


def _seed(kind=SUM, rows=ROWS, row=ROW, **changes) -> str:
    return SEED.format(rows=rows, row=row, **{**kind, **changes})


def _child(source: str, **settings):
    op = SplitReduction(**{"min_row": 1024, **settings})  # rows short enough for the interpreter
    return op.applies_to(as_seed(source)), child_of(op, source)


def _run(source: str, tmp_path, name: str, x):
    return load_source(source, tmp_path, name, compiled=False)._call(x)


@pytest.mark.parametrize("kind, expected, split", [
    (SUM, lambda x: (x * x).sum(1), None),  # the operator's first split
    (SUM, lambda x: (x * x).sum(1), 3),  # runs of 2 blocks, the last of them partly past the row's end
    (SUM, lambda x: (x * x).sum(1), 64),  # more runs asked for than the row has blocks: one block each
    (MAX, lambda x: (x * x).amax(1), None)])
def test_the_rows_split_across_programs_give_the_parents_result(kind, expected, split, tmp_path):
    seed = _seed(kind)
    applies, proposal = _child(seed)
    assert applies and proposal.source is not None, proposal.note
    child = proposal.source
    assert "def triton_red_fused_mean_pow_sum_0_split_r0(" in child and "K0_SPLIT_R0 = " in child
    assert any(t.name == "K0_SPLIT_R0" and t.kind == "grid" for t in find_tunables(child))  # the search moves it
    if split is not None:
        child = child.replace(f"K0_SPLIT_R0 = {[t for t in find_tunables(child) if t.name == 'K0_SPLIT_R0'][0].value}",
                              f"K0_SPLIT_R0 = {split}")
    torch.manual_seed(0)
    x = torch.randn(ROWS, ROW, device=DEVICE)
    mean, total = _run(child, tmp_path, f"child_{split}_{kind['reduce'][-4:]}", x)
    parent_mean, parent_total = _run(seed, tmp_path, f"parent_{split}_{kind['reduce'][-4:]}", x)
    torch.testing.assert_close(total, expected(x), atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(mean, expected(x) / ROW, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(total, parent_total, atol=1e-3, rtol=1e-4)


def test_what_cannot_be_split_is_refused_with_its_reason():
    # an all-true row mask: a run past the row's end would read beyond it
    applies, proposal = _child(_seed(mask="tl.full([R0_BLOCK], True, tl.int1)[None, :]"))
    assert not applies and "row mask" in proposal.note
    # an accumulator that does not start at its reduction's identity
    applies, proposal = _child(_seed(init="1"))
    assert not applies and "identity" in proposal.note
    # a max accumulated by a sum
    applies, proposal = _child(_seed(MAX, update="_tmp2 + tmp1"))
    assert not applies and "updated other than" in proposal.note
    # code after the loop that reads the row's block (pass two keeps no row index)
    applies, proposal = _child(_seed().replace("    tmp4 = 1500.0\n", "    tmp4 = 1500.0 + RBLOCK * 0\n"))
    assert not applies and "row's indices" in proposal.note
    # many rows, or short ones: nothing to split
    assert not _child(_seed(), max_rows=2)[0] and not _child(_seed(), min_row=4096)[0]
    # a second loop over the row (softmax's two passes)
    seed = _seed()
    loop = seed[seed.index("    for r0_offset"):seed.index("    tmp2 = tl.sum")]
    applies, proposal = _child(seed.replace(loop, loop + loop))
    assert not applies and "more than one loop" in proposal.note

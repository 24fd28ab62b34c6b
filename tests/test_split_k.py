"""The split-K operator: a GEMM template with few output tiles and a long K becomes two launches,
partial tiles over runs of K into a workspace, then their sum and the template's epilogue."""
import ast

import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evaluator.compile_seed import seed_from_inductor
from evo.core.kernel_source import find_tunables
from evo.core.program import Program
from evo.core.task import load_tasks
from operators.split_k import SplitK
from tests.support.modules import run_compiled
from tests.support.proposals import child_of
from tests.test_compile_seed import DATA, MATMUL_INPUTS, gemm_template, matmul_task

# A product with one 64 x 32 output tile and K = 1024: the template walks K in one program.
TASK = matmul_task(64, 1024, 32)


def _seed(m=64, n=32, k=1024, even_k=False, relu=False) -> str:
    """Inductor's fp16 GEMM template (captured on an H200) compiled for fixed extents, as a seed."""
    code = gemm_template(m, n, k)
    if relu:  # an epilogue fused into the template: right only if it sees the whole sum over K
        code = code.replace("[BLOCK_M, BLOCK_N])), acc, mask)", "[BLOCK_M, BLOCK_N])), tl.maximum(acc, 0.0), mask)")
    if even_k:  # specialised to K divisible by BLOCK_K: no masks along K, BLOCK_K pinned
        code = code.replace("EVEN_K : tl.constexpr = False", "EVEN_K : tl.constexpr = True")
    task = load_tasks("default", names=["matmul_fp16"])[0]
    source = seed_from_inductor(code, MATMUL_INPUTS, task.source)
    # BLOCK_K 32 (tunable, or pinned where EVEN_K): 32 steps along K = 1024
    return source.replace("K0_BLOCK_K = 128", "K0_BLOCK_K = 32").replace("BLOCK_K : tl.constexpr = 128",
                                                                         "BLOCK_K : tl.constexpr = 32")


def _child(source: str, seed: int = 0):
    return child_of(SplitK(), source, task="mm", task_source=TASK, seed=seed)


def test_a_gemm_with_few_tiles_and_a_long_k_is_split_with_a_tunable_split():
    proposal = _child(_seed())
    assert proposal.note == "triton_tem_fused_mm_0: K in 8 parts (1 tiles, 32 steps of BLOCK_K)"
    child = proposal.source
    tree = ast.parse(child)
    kernels = [f.name for f in tree.body if isinstance(f, ast.FunctionDef) and f.decorator_list]
    assert kernels == ["triton_tem_fused_mm_0_split_k", "triton_tem_fused_mm_0"]
    assert {t.name: (t.kind, t.value) for t in find_tunables(child)}["K0_SPLIT_K"] == ("grid", 8)
    # the partial kernel keeps the template's loop body and stores into the workspace; the other
    # sums the partials in a fixed order (no atomics) and keeps the template's epilogue
    assert child.count("acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)") == 1
    assert child.count("tl.store(out_ptr0 + (tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N])), acc, mask)") == 1
    assert "atomic" not in child
    assert "_steps = triton.cdiv(1024, K0_BLOCK_K)" in child
    assert "_split = max(1, min(K0_SPLIT_K, _steps, 131072))" in child
    assert "triton_tem_fused_mm_0_split_k[(grid[0], _split, 1)](arg_A, arg_B, out_ptr0" in child
    # a split child is not split again; a pinned BLOCK_K is read from the kernel
    assert not SplitK().applies_to(Program(id=2, task="mm", island=0, generation=1, operator="split_k",
                                           source=child))
    assert "triton.cdiv(1024, 32)" in _child(_seed(even_k=True)).source


def test_many_tiles_a_short_k_or_no_template_leave_nothing_to_split():
    many = Program(id=1, task="mm", island=0, generation=0, operator="seed", source=_seed(m=4096, n=4096))
    short = Program(id=2, task="mm", island=0, generation=0, operator="seed", source=_seed(k=128))
    assert not SplitK().applies_to(many) and not SplitK().applies_to(short)
    assert SplitK(max_tiles=8192).applies_to(many)
    # symbolic extents (inductor compiled for dynamic shapes): no literal M, N, K to size the workspace
    dynamic = seed_from_inductor((DATA / "matmul_fp16_template.py.txt").read_text(), MATMUL_INPUTS,
                                 load_tasks("default", names=["matmul_fp16"])[0].source)
    assert not SplitK().applies_to(Program(id=3, task="mm", island=0, generation=0, operator="seed",
                                           source=dynamic))
    assert _child("x = 1\n").source is None
    with pytest.raises(ValueError):
        SplitK(min_k_steps=1)


@pytest.mark.slow
def test_split_children_are_correct_for_any_split():
    evaluator = Evaluator(EvaluatorSettings(device="cpu", timeout_s=120), "cpu")
    try:
        # 3 parts, taken as 2 (the largest split that divides the 32 steps of BLOCK_K), masked loads
        child = _child(_seed()).source.replace("K0_SPLIT_K = 8", "K0_SPLIT_K = 3")
        result = evaluator.evaluate("mm", TASK, child)
        assert result.status is Status.CORRECT, (result.reason, result.error)
        # 8 parts of 4 steps, loads without masks along K (EVEN_K)
        result = evaluator.evaluate("mm", TASK, _child(_seed(even_k=True)).source)
        assert result.status is Status.CORRECT, (result.reason, result.error)
        # the template's epilogue (a ReLU here) applied once, to the sum of the partials
        relu_task = TASK.replace("return torch.matmul(A, B)", "return torch.relu(torch.matmul(A, B))")
        child = _child(_seed(relu=True)).source
        assert child.count("tl.maximum(acc, 0.0)") == 1
        result = evaluator.evaluate("mm_relu", relu_task, child)
        assert result.status is Status.CORRECT, (result.reason, result.error)
    finally:
        evaluator.close()


@pytest.mark.gpu
def test_split_children_compile_and_are_correct_on_a_gpu(tmp_path):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    path = tmp_path / "split_k_child.py"
    path.write_text(_child(_seed()).source)
    run_compiled(f"""
import torch
from tests.support.modules import load_module
module = load_module({str(path)!r})
a = torch.randn(64, 1024, dtype=torch.float16, device="cuda")
b = torch.randn(1024, 32, dtype=torch.float16, device="cuda")
torch.testing.assert_close(module.ModelNew().cuda()(a, b), a @ b, atol=1e-2, rtol=1e-2)
""")


def test_a_run_starts_a_gemm_of_few_tiles_and_a_long_k_split_before_its_other_seeds():
    """KernelBench's long-K products (level1/6: 64 tiles, 4096 steps of BLOCK_K) ran their seed at 7.5x
    torch.compile's time on an H200 (cuBLAS splits K); their first seeds are now split."""
    from evo.core.dot_precision import seed_kernels
    from evo.loop.startup import starting_kernels

    seed = _seed()  # one tile, 32 steps of BLOCK_K
    split, split_exact, *rest = starting_kernels(seed, "strict")
    assert tuple(rest) == seed_kernels(seed, "strict")  # the twin on tensor cores, then the seed itself
    for kernel in (split, split_exact):
        assert kernel.startswith("# The seed with its GEMM templates of few tiles and a long K split")
        assert "K0_SPLIT_K = 8" in kernel and "_split_k[(grid[0], _split, 1)]" in kernel
    assert 'input_precision="tf32x3"' in split  # split from the twin, the run's first kernel
    assert 'input_precision="tf32x3"' not in split_exact  # and from the seed (on level1/6 the faster)
    # many tiles, or a short K: the seeds as they were
    assert starting_kernels(_seed(m=4096, n=4096), "strict") == seed_kernels(_seed(m=4096, n=4096), "strict")
    assert starting_kernels(_seed(k=512), "kernelbench") == seed_kernels(_seed(k=512), "kernelbench")



def test_a_split_rewrite_that_raises_leaves_the_seeds_as_they_were(monkeypatch):
    import evo.loop.startup as startup
    from evo.core.dot_precision import seed_kernels

    def broken(source):
        raise IndexError("a template the rewrite did not foresee")

    monkeypatch.setattr(startup, "split_seed", broken)
    assert startup.starting_kernels(_seed(), "strict") == seed_kernels(_seed(), "strict")


@pytest.mark.slow
def test_the_split_seed_is_correct():
    from evo.loop.startup import starting_kernels

    evaluator = Evaluator(EvaluatorSettings(device="cpu", timeout_s=120), "cpu")
    try:
        result = evaluator.evaluate("mm", TASK, starting_kernels(_seed(), "kernelbench")[0])
        assert result.status is Status.CORRECT, (result.reason, result.error)
    finally:
        evaluator.close()


def test_the_split_seed_widens_a_small_tile_where_the_output_allows():
    """Split, the programs come from K: inductor's 32 x 32 tile (tuned unsplit) ran level1/6 split at
    3.4x cuBLAS's time on an H200; the split seed's tile is at least 64 square where M and N allow."""
    from operators.split_k import split_seed

    seed = _seed(m=128, n=128)  # a 64 x 32 tile: 8 tiles, 32 steps of BLOCK_K
    split = split_seed(seed)
    assert "K0_BLOCK_M = 64" in split and "K0_BLOCK_N = 64" in split  # 4 tiles
    assert "K0_SPLIT_K = 8" in split  # first_split(4 tiles, 32 steps): 8 parts of 4 steps
    assert "K0_BLOCK_N = 32" in seed
    assert "K0_BLOCK_N = 32" in split_seed(_seed(m=128, n=32))  # N = 32: the tile stays
    assert "K0_BLOCK_N = 128" in split_seed(_seed(m=128, n=128), tile=128)

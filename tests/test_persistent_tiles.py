"""The persistent-tiles operator: a GEMM template launched on at most PROGRAMS_PER_SM programs per
SM, each looping over output tiles with the template's own body."""
import ast

import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evaluator.compile_seed import seed_from_inductor
from evo.core.kernel_source import find_tunables
from evo.core.program import Program
from evo.core.task import load_tasks
from operators.persistent_tiles import PersistentTiles
from tests.support.modules import run_compiled
from tests.support.proposals import ELEMENTWISE, as_seed, child_of
from tests.test_compile_seed import MATMUL_INPUTS, gemm_template, matmul_task

# 100 x 72 by K = 96: neither extent a multiple of the tile, so the template's masks matter.
TASK = matmul_task(100, 96, 72)


def _seed(m=100, n=72, k=96, block_m=16, block_n=16) -> str:
    """Inductor's fp16 GEMM template (captured on an H200) for fixed extents, as a seed: 16 x 16
    tiles make 7 x 5 = 35 of them, several per program on the interpreter's 4 "SMs"."""
    code = gemm_template(m, n, k)
    source = seed_from_inductor(code, MATMUL_INPUTS, load_tasks("default", names=["matmul_fp16"])[0].source)
    source = source.replace("K0_BLOCK_M = 64", f"K0_BLOCK_M = {block_m}")
    source = source.replace("K0_BLOCK_N = 32", f"K0_BLOCK_N = {block_n}")
    return source.replace("K0_BLOCK_K = 128", "K0_BLOCK_K = 32")


def _program(source: str) -> Program:
    return as_seed(source, "mm")


def _child(source: str, seed: int = 0, **kwargs):
    return child_of(PersistentTiles(**kwargs), source, task="mm", task_source=TASK, seed=seed)


def _kernel(source: str) -> ast.FunctionDef:
    return next(f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef) and f.decorator_list)


def test_a_gemm_template_becomes_a_loop_over_tiles_with_a_tunable_programs_per_sm():
    parent = _seed()
    assert PersistentTiles().applies_to(_program(parent))
    proposal = _child(parent, programs_per_sm=2)
    assert proposal.note == "triton_tem_fused_mm_0: persistent over its tiles, 2 program(s) per SM to start"
    child = proposal.source
    tree = ast.parse(child)
    constants = {n.targets[0].id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Constant)}
    assert constants["K0_PROGRAMS_PER_SM"] == 2 and constants["K0_BLOCK_M"] == 16
    # a tunable the constants operator and the sweep move, as a power of two
    assert {t.name: t.kind for t in find_tunables(child)}["K0_PROGRAMS_PER_SM"] == "grid"
    assert "K0_PROGRAMS_PER_SM = 2\n" in child.split("@triton.jit")[0]  # among the kernel's constants
    kernel = _kernel(child)
    # the prologue (extents, the early exit) stays outside; pid through the store move into the loop
    loops = [s for s in kernel.body if isinstance(s, ast.For)]
    assert [ast.unparse(s.iter) for s in loops] == ["range(tl.program_id(0), _num_tiles, tl.num_programs(0))"]
    assert ast.unparse(loops[0].body[0]) == "pid = tl.cast(_tile, INDEX_DTYPE)"
    assert kernel.body[-1] is loops[0] and ast.unparse(kernel).count("program_id") == 1
    assert any(isinstance(s, ast.If) and "M * N == 0" in ast.unparse(s.test) for s in kernel.body)
    inner = ast.unparse(loops[0])
    assert "for k_idx in range(0, tl.cdiv(K, BLOCK_K)):" in inner and "tl.store(out_ptr0" in inner
    # the launcher: min(tiles, programs per SM x SMs) programs, the SM count cached per device
    assert ("grid = (min(triton.cdiv(100, K0_BLOCK_M) * triton.cdiv(72, K0_BLOCK_N), "
            "K0_PROGRAMS_PER_SM * _persistent_sm_count(arg_A)), 1, 1)") in child
    assert child.count("grid = ") == 1 and "_PERSISTENT_SM_COUNTS = {}" in child
    # a block size pinned in the kernel is read from there
    pinned = (parent.replace("BLOCK_M: tl.constexpr, ", "").replace("BLOCK_M=K0_BLOCK_M, ", "")
              .replace("    EVEN_K : tl.constexpr", "    BLOCK_M : tl.constexpr = 64\n    EVEN_K : tl.constexpr"))
    assert "triton.cdiv(100, 64) * triton.cdiv(72, K0_BLOCK_N)" in _child(pinned).source


def test_no_template_or_a_persistent_one_or_a_return_after_pid_get_no_child():
    for source in (ELEMENTWISE, "x = 1\n", "def broken(:\n", _child(_seed()).source):
        assert not PersistentTiles().applies_to(_program(source))
        assert _child(source).source is None
    # inside the loop a return would drop the program's remaining tiles
    returning = _seed().replace("    tl.assume(pid_n >= 0)\n", "    tl.assume(pid_n >= 0)\n    if pid_m > 1000:\n"
                                                                 "        return\n")
    assert "return\n" in returning.split("tl.assume(pid_n >= 0)")[1]
    assert not PersistentTiles().applies_to(_program(returning))
    proposal = _child(returning)
    assert proposal.source is None and "a return after pid" in proposal.note
    with pytest.raises(ValueError, match="power of two"):
        PersistentTiles(programs_per_sm=3)


@pytest.mark.slow
def test_persistent_children_are_correct_for_any_programs_per_sm():
    evaluator = Evaluator(EvaluatorSettings(device="cpu", timeout_s=120), "cpu")
    try:
        # 35 tiles of 16 x 16 on 4 "SMs": 4 programs walk up to 9 tiles each
        child = _child(_seed()).source
        result = evaluator.evaluate("mm", TASK, child)
        assert result.status is Status.CORRECT, (result.reason, result.error)
        # 6 tiles of 64 x 32 (the last row and column partial); 16 per SM asks for 64 programs: 6 run
        child = _child(_seed(block_m=64, block_n=32), programs_per_sm=16).source
        assert "K0_PROGRAMS_PER_SM = 16" in child
        result = evaluator.evaluate("mm", TASK, child)
        assert result.status is Status.CORRECT, (result.reason, result.error)
    finally:
        evaluator.close()


@pytest.mark.gpu
def test_persistent_children_compile_and_are_correct_on_a_gpu(tmp_path):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for programs_per_sm in (1, 4):
        path = tmp_path / f"persistent_child_{programs_per_sm}.py"
        path.write_text(_child(_seed(), programs_per_sm=programs_per_sm).source)
        run_compiled(f"""
import torch
from tests.support.modules import load_module
module = load_module({str(path)!r})
a = torch.randn(100, 96, dtype=torch.float16, device="cuda")
b = torch.randn(96, 72, dtype=torch.float16, device="cuda")
torch.testing.assert_close(module.ModelNew().cuda()(a, b), a @ b, atol=1e-2, rtol=1e-2)
assert module._PERSISTENT_SM_COUNTS == {{a.device: torch.cuda.get_device_properties(0).multi_processor_count}}
""")
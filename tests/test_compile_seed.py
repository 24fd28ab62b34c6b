"""Seeds from torch.compile: inductor's output (captured on an H200, tests/data/inductor/) made into
candidates that the evaluator accepts, here through Triton's interpreter."""
import re
import shutil
from pathlib import Path

import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evaluator import DerivedSeed
from evaluator.compile_seed import NoSeed, seed_from_inductor
from evo.core.kernel_source import find_tunables
from evo.core.task import load_tasks
from tests.support import StandInBackend

DATA = Path(__file__).parent / "data" / "inductor"


def sizes(name: str) -> list[str]:
    return [f"L['{name}'].size()[0]", f"L['{name}'].size()[1]", f"L['{name}']"]


# The graph inputs dynamo recorded for each reference, in the order of inductor's call(args).
GRAPH_INPUTS = {
    "gelu": sizes("x"),
    "bias_gelu": [*sizes("x"), "L['bias']"],
    "layernorm": [*sizes("x"), "L['weight']", "L['bias']"],
    "rmsnorm": [*sizes("x"), "L['self'].eps", "L['weight']"],
    "cross_entropy": [*sizes("logits"), "L['targets']"],
    "softmax": sizes("x"),
    "row_sum": sizes("x"),
}


@pytest.fixture(scope="module")
def evaluator():
    ev = Evaluator(EvaluatorSettings(device="cpu", timeout_s=120), "cpu")
    yield ev
    ev.close()


@pytest.mark.parametrize("name", sorted(GRAPH_INPUTS))
def test_inductor_output_becomes_a_plain_candidate(name):
    task = load_tasks("default", names=[name])[0]
    source = seed_from_inductor((DATA / f"{name}.py.txt").read_text(), GRAPH_INPUTS[name], task.source)
    compile(source, name, "exec")
    tunables = {t.name: t.kind for t in find_tunables(source)}
    assert tunables["K0_NUM_WARPS"] == "warps" and any(kind in ("block", "grid") for kind in tunables.values())
    assert "triton_heuristics" not in source and "stream" not in source and "assert_size_stride" not in source
    assert "class ModelNew(_Reference)" in source and source.count("def forward(") == 1


@pytest.mark.slow
def test_a_seed_starts_from_the_configuration_inductors_autotuning_chose(evaluator):
    task = load_tasks("default", names=["row_sum"])[0]
    code = (DATA / "row_sum.py.txt").read_text()
    kernel = re.search(r"^(\w+) = async_compile\.triton", code, re.MULTILINE).group(1)
    chosen = {kernel: {"kwargs": {"XBLOCK": 8, "R0_BLOCK": 64}, "num_warps": 2, "num_stages": 1}}
    source = seed_from_inductor(code, sizes("x"), task.source, configs=chosen)
    assert {"K0_ROWS_PER_PROGRAM = 8", "K0_BLOCK_R0 = 64", "K0_NUM_WARPS = 2", "K0_NUM_STAGES = 1"} <= set(
        source.splitlines())
    assert "num_stages=K0_NUM_STAGES" in source
    assert evaluator.evaluate("row_sum", task.source, source).status is Status.CORRECT


@pytest.mark.slow
def test_a_converted_seed_is_correct_and_mutable(evaluator):
    # row_sum's kernels use no libdevice function, which Triton's interpreter cannot run;
    # the other tasks' seeds are checked on a GPU (experiments/compile_seeds_gpu.md).
    task = load_tasks("default", names=["row_sum"])[0]
    source = seed_from_inductor((DATA / "row_sum.py.txt").read_text(), sizes("x"), task.source)
    result = evaluator.evaluate("row_sum", task.source, source)
    assert result.status is Status.CORRECT, (result.reason, result.error)
    changed = source.replace("K0_BLOCK_R0 = 2048", "K0_BLOCK_R0 = 64").replace("K0_ROWS_PER_PROGRAM = 1",
                                                                                "K0_ROWS_PER_PROGRAM = 4")
    assert changed.count("K0_") == source.count("K0_") and changed != source
    assert evaluator.evaluate("row_sum", task.source, changed).status is Status.CORRECT


def test_a_graph_that_calls_cublas_gives_no_seed():
    task = load_tasks("default", names=["matmul_fp16"])[0]
    code = (DATA / "matmul_fp16.py.txt").read_text()
    with pytest.raises(NoSeed, match="extern_kernels"):  # compiled without max-autotune's GEMM templates
        seed_from_inductor(code, MATMUL_INPUTS, task.source)


MATMUL_INPUTS = [*sizes("A"), "L['B'].size()[1]", "L['B']"]


def gemm_template(m: int, n: int, k: int) -> str:
    """Inductor's fp16 GEMM template (captured on an H200) compiled for fixed extents, as inductor
    compiles KernelBench's fixed shapes (``M = 16384`` where it read ``ks0``)."""
    code = (DATA / "matmul_fp16_template.py.txt").read_text()
    for i, (name, value) in enumerate((("M", m), ("N", n), ("K", k))):
        code = code.replace(f"    {name} = ks{i}\n", f"    {name} = {value}\n")
    return code


def matmul_task(m: int, k: int, n: int) -> str:
    """A task multiplying an fp16 (m, k) matrix by a (k, n) one."""
    return f'''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn({m}, {k}, dtype=torch.float16), torch.randn({k}, {n}, dtype=torch.float16)]


def get_init_inputs():
    return []
'''


def test_a_gemm_template_becomes_a_seed_whose_tile_is_tunable():
    task = load_tasks("default", names=["matmul_fp16"])[0]
    code = (DATA / "matmul_fp16_template.py.txt").read_text()  # max-autotune over Triton GEMM configurations
    source = seed_from_inductor(code, MATMUL_INPUTS, task.source)
    tunables = {t.name: (t.kind, t.value) for t in find_tunables(source)}
    assert tunables == {"K0_BLOCK_M": ("block", 64), "K0_BLOCK_N": ("block", 32), "K0_BLOCK_K": ("block", 128),
                        "K0_GROUP_M": ("group", 8), "K0_NUM_WARPS": ("warps", 4), "K0_NUM_STAGES": ("stages", 5)}
    assert "BLOCK_M : tl.constexpr = 64" not in source and "triton_heuristics.template" not in source
    assert "grid = (triton.cdiv(ks0, K0_BLOCK_M) * triton.cdiv(ks1, K0_BLOCK_N), _grid_1, _grid_2)" in source


@pytest.mark.slow
def test_a_gemm_template_seed_is_correct_with_another_tile(evaluator):
    task = load_tasks("default", names=["matmul_fp16"])[0]
    source = seed_from_inductor((DATA / "matmul_fp16_template.py.txt").read_text(), MATMUL_INPUTS, task.source)
    # A tile inductor did not choose: the grid follows the constants, masks cover the edges.
    retiled = source.replace("K0_BLOCK_K = 128", "K0_BLOCK_K = 32").replace("K0_BLOCK_M = 64", "K0_BLOCK_M = 16")
    result = evaluator.evaluate("matmul_fp16", task.source, retiled)
    assert result.status is Status.CORRECT, (result.reason, result.error)


@pytest.mark.slow
def test_a_gemm_specialised_to_k_keeps_its_block_k_and_retiles_the_rest(evaluator):
    task = load_tasks("default", names=["matmul_fp16"])[0]
    code = (DATA / "matmul_fp16_template.py.txt").read_text()
    # As if inductor had specialised the GEMM to K divisible by BLOCK_K (no masks along K): another
    # BLOCK_K could read past K, so it stays as inductor chose it; rows and columns still retile.
    even = seed_from_inductor(code.replace("EVEN_K : tl.constexpr = False", "EVEN_K : tl.constexpr = True"),
                              MATMUL_INPUTS, task.source)
    assert {t.name for t in find_tunables(even)} == {"K0_BLOCK_M", "K0_BLOCK_N", "K0_GROUP_M", "K0_NUM_WARPS",
                                                     "K0_NUM_STAGES"}
    assert "BLOCK_K : tl.constexpr = 128" in even and "BLOCK_M : tl.constexpr = 64" not in even
    assert "grid = (triton.cdiv(ks0, K0_BLOCK_M) * triton.cdiv(ks1, K0_BLOCK_N), _grid_1, _grid_2)" in even
    retiled = even.replace("K0_BLOCK_M = 64", "K0_BLOCK_M = 16").replace("K0_BLOCK_N = 32", "K0_BLOCK_N = 64")
    result = evaluator.evaluate("matmul_fp16", task.source, retiled)
    assert result.status is Status.CORRECT, (result.reason, result.error)


def test_a_gemm_compiled_for_static_shapes_retiles_with_its_literal_extents():
    """Inductor compiles KernelBench's fixed shapes into the template (``M = 16384``): the grid
    the launcher computes reads them, where it read the kernel's size parameters."""
    task = load_tasks("default", names=["matmul_fp16"])[0]
    code = (DATA / "matmul_fp16_template.py.txt").read_text()
    static = code.replace("    M = ks0\n", "    M = 512\n").replace("    N = ks1\n", "    N = 384\n")
    assert static.count("M = 512") == 1 and static.count("N = 384") == 1
    source = seed_from_inductor(static, MATMUL_INPUTS, task.source)
    assert "grid = (triton.cdiv(512, K0_BLOCK_M) * triton.cdiv(384, K0_BLOCK_N), _grid_1, _grid_2)" in source
    assert {"K0_BLOCK_M", "K0_BLOCK_N", "K0_BLOCK_K", "K0_GROUP_M"} <= {t.name for t in find_tunables(source)}
    # neither a parameter nor a literal: the tile stays pinned, with inductor's grid
    pinned = seed_from_inductor(code.replace("    M = ks0\n", "    M = ks0 * 2\n"), MATMUL_INPUTS, task.source)
    assert {t.name for t in find_tunables(pinned)} == {"K0_NUM_WARPS", "K0_NUM_STAGES"}
    assert "grid = (_grid_0, _grid_1, _grid_2)" in pinned


def test_a_template_launched_in_an_unknown_way_gives_no_seed():
    task = load_tasks("default", names=["matmul_fp16"])[0]
    code = (DATA / "matmul_fp16_template.py.txt").read_text()
    with pytest.raises(NoSeed, match="launch the converter does not understand"):
        seed_from_inductor(code.replace("'grid_type': 'FixedGrid'", "'grid_type': 'PrecomputedGrid'"),
                           MATMUL_INPUTS, task.source)


def test_graph_inputs_must_match_the_wrapper():
    task = load_tasks("default", names=["gelu"])[0]
    code = (DATA / "gelu.py.txt").read_text()
    with pytest.raises(NoSeed, match="do not match"):
        seed_from_inductor(code, ["L['x']"], task.source)
    with pytest.raises(NoSeed, match="not the module"):
        seed_from_inductor(code, ["L['x'].size()[0]", "G['table']", "L['x']"], task.source)
    with pytest.raises(NoSeed, match="no Triton kernel"):
        seed_from_inductor("def call(args):\n    return ()\n", [], task.source)


class SeedingBackend(StandInBackend):
    """Every reference passes, seeds come from ``reply``."""

    def __init__(self, reply: DerivedSeed):
        self.reply, self.asked = reply, []

    def compile_seed(self, task_name, task_source) -> DerivedSeed:
        self.asked.append(task_name)
        return self.reply


def test_a_task_without_seed_gets_one_from_torch_compile_on_gpus():
    from rich.console import Console

    from evo.loop.startup import prepare_tasks
    from evo.core.task import Task

    task, quiet = Task(name="t", path="/x/t.py", source="..."), Console(quiet=True)
    seeded = Task(name="s", path="/x/s.py", source="...", seeds=("MINE",))

    def prepare(backend, tasks, on_gpu=True, compile_seeds=True, llm=False):
        return prepare_tasks(tasks, backend, on_gpu=on_gpu, compile_seeds=compile_seeds, llm=llm, earlier={},
                             has_programs=set(), console=quiet)

    backend = SeedingBackend(DerivedSeed(ok=True, source="SEED"))
    prepared = prepare(backend, [task, seeded])
    assert [t.seeds for t in prepared.tasks] == [("SEED",), ("MINE",)] and backend.asked == ["t"]
    prepared = prepare(backend, [task], compile_seeds=False)
    assert not prepared.tasks and prepared.set_aside[0].stage == "seed"
    assert "has no seed kernel" in prepared.set_aside[0].reason and "compile_seeds" in prepared.set_aside[0].reason
    failing = SeedingBackend(DerivedSeed(ok=False, error="the graph calls extern_kernels"))
    aside = prepare(failing, [task]).set_aside[0]
    assert "torch.compile gave none: the graph calls extern_kernels" in aside.reason and "llm.model" in aside.reason
    assert prepare(failing, [task], llm=True).tasks == [task]  # the LLM writes its seeds
    assert "on a GPU, torch.compile derives one" in prepare(backend, [task], on_gpu=False).set_aside[0].reason


def test_a_derived_gemm_seed_comes_with_its_tensor_core_twin_first():
    from rich.console import Console

    from evo.core.task import Task
    from evo.loop.startup import prepare_tasks

    template = "K0_NUM_WARPS = 4\nacc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)\n"
    backend, task = SeedingBackend(DerivedSeed(ok=True, source=template)), Task(name="t", path="/x/t.py", source="...")
    for tolerance, precision in (("strict", "tf32x3"), ("kernelbench", "tf32")):
        prepared = prepare_tasks([task], backend, on_gpu=True, compile_seeds=True, llm=False, earlier={},
                                 has_programs=set(), console=Console(quiet=True), tolerance=tolerance)
        first, derived = prepared.tasks[0].seeds
        assert f'input_precision="{precision}"' in first and derived == template


def test_the_cpu_evaluator_explains_that_compile_seeds_need_a_gpu(evaluator):
    task = load_tasks("default", names=["gelu"])[0]
    reply = evaluator.compile_seed(task.name, task.source)
    assert reply.ok is False and "need a GPU" in reply.error


@pytest.mark.skipif(shutil.which("g++") is None, reason="inductor on the CPU needs a C++ compiler")
@pytest.mark.slow
def test_capture_records_the_graph_inputs_in_the_wrappers_order():
    # On the CPU inductor writes C++, not Triton: this checks the capture and the mapping only.
    from evaluator.seed_capture import capture

    task = load_tasks("default", names=["rmsnorm"])[0]
    namespace: dict = {}
    exec(compile(task.source, task.path, "exec"), namespace)
    reference = namespace["Model"](*namespace["get_init_inputs"]())
    code, graph_inputs, configs = capture(reference, namespace["get_inputs"](rows=7, cols=129))
    assert graph_inputs == [*sizes("x"), "L['weight']"]  # eps, a float attribute, is a constant
    assert "def call(" in code and configs == {}  # C++: no Triton kernel to have a configuration
    with pytest.raises(NoSeed, match="no Triton kernel|besides Triton"):
        seed_from_inductor(code, graph_inputs, task.source)


def test_only_a_graph_without_products_compiles_as_host_work_beside_a_timing():
    """Max-autotune benchmarks GEMM templates on the GPU while it compiles: such a compile is stopped
    like any GPU work while another evaluation times; one without products is host work, spared."""
    import torch

    from evaluator.seed_capture import _benchmarked

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x, y):
            return self.linear(x) + (x @ y) + x.mm(y) + torch.relu(x)

    graphs = []
    torch.compile(Model(), backend=lambda gm, _: graphs.append(gm) or gm.forward)(torch.randn(4, 4), torch.randn(4, 4))
    flags = [(str(node.target), _benchmarked(node)) for node in graphs[0].graph.nodes if node.op.startswith("call")]
    assert [benchmarked for _, benchmarked in flags] == [True, True, False, True, False, False, False], flags


def test_the_modules_max_autotune_compiles_to_benchmark_a_subgraph_choice_are_not_the_graphs():
    """A GEMM's subgraph choices (decompose-K, a contiguous copy first) are lowered into modules of
    their own, named ``benchmark_<choice>``, while the graph compiles: their code is not the seed's
    (KernelBench level1/4 and level1/6 failed as "1 graphs" before)."""
    from types import SimpleNamespace

    from torch._inductor.virtualized import V

    from evaluator.seed_capture import _benchmark_graph

    assert not _benchmark_graph()  # no graph being lowered
    with V.set_graph_handler(SimpleNamespace(name="benchmark_decompose_k_mm_32_split")):
        assert _benchmark_graph()
    with V.set_graph_handler(SimpleNamespace(name=None)):
        assert not _benchmark_graph()


def test_a_matrix_vector_product_is_captured_as_a_reduction_not_a_gemm_template():
    """Inductor's GEMM template sums all of K in one running fp32 sum a row: KernelBench's
    level1/4 (K = 2**20) came out 2e-4 off cuBLAS.  A product with one column or one row out is
    traced as a product and a sum, which inductor writes as a reduction."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from evaluator.seed_capture import _decompositions

    table = _decompositions()
    mm = table[torch.ops.aten.mm.default]
    a, column, row, b = torch.randn(6, 300), torch.randn(300, 1), torch.randn(1, 300), torch.randn(300, 5)
    torch.testing.assert_close(mm(a, column), a @ column)
    torch.testing.assert_close(mm(row, b), row @ b)
    half = mm(a.half(), column.half())
    assert half.dtype == torch.float16 and half.shape == (6, 1)
    torch.testing.assert_close(half.float(), a.half().float() @ column.half().float(), atol=0.05, rtol=1e-3)

    def ops(fn, *inputs):
        graph = make_fx(fn, decomposition_table=table)(*inputs)
        return {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}

    assert "aten.mm.default" not in ops(torch.matmul, a, column) and "aten.sum.dim_IntList" in ops(torch.matmul, a, column)
    assert "aten.mm.default" in ops(torch.matmul, a, b)  # a GEMM stays one (inductor's template, max-autotuned)

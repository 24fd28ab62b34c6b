import ast

from evo.core.descriptors import DESCRIPTORS, NONE, analyse, by_names, cell_key, describe, grid_size, parse_cell_key
from evo.core.kernel_facts import kernel_facts
from evo.core.kernel_source import normalized_hash

ALL = tuple(DESCRIPTORS.values())

ROW_KERNEL = '''
import triton, triton.language as tl
BLOCK_SIZE = 300
NUM_WARPS = 8
@triton.jit
def k(x_ptr, n, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, n, BLOCK_SIZE):
        pass
    for start in range(0, n, BLOCK_SIZE):
        pass
'''

PERSISTENT_MATMUL = '''
import triton, triton.language as tl
@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    for tile in range(tl.program_id(0), M * N, tl.num_programs(0)):
        a = tl.load(tl.make_block_ptr(a_ptr, (M, K), (K, 1), (0, 0), (BLOCK_M, 32), (1, 0)))
        acc = tl.dot(a, a)
def launch(a):
    mm[(132,)](a, a, a, 1, 1, 1, BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3)
'''


def test_row_kernel():
    d = describe(ROW_KERNEL, ALL)
    assert d == {"block_size": "256", "num_warps": "8", "num_stages": NONE, "memory": "plain",
                 "compute": "multi_pass", "parallel": "grid_1d"}


def test_persistent_tensor_core_kernel():
    d = describe(PERSISTENT_MATMUL, ALL)
    assert d["compute"] == "tensor_core" and d["parallel"] == "persistent"
    assert d["memory"] == "pipelined" and d["num_stages"] == "2"  # 3 stages round down to 2
    assert d["block_size"] == "128"
    facts = kernel_facts(PERSISTENT_MATMUL)
    assert facts.block_pointers and facts.kernels == 1 and facts.max_stages == 3


def test_unparsable_source_lands_in_the_none_cells():
    assert set(describe("def (", ALL).values()) == {NONE}


def test_one_parse_gives_the_same_hash_and_descriptors_as_the_separate_functions(monkeypatch):
    for source in (ROW_KERNEL, PERSISTENT_MATMUL, "def ("):
        expected = normalized_hash(source), describe(source, ALL)
        parses = []
        real_parse = ast.parse
        monkeypatch.setattr(ast, "parse", lambda *a, **k: parses.append(1) or real_parse(*a, **k))
        assert analyse(source, ALL) == expected
        monkeypatch.undo()
        assert len(parses) == 1 or source == "def ("  # an unparsable source is hashed as text
    tree = ast.parse(ROW_KERNEL)
    assert describe(ROW_KERNEL, ALL, tree) == describe(ROW_KERNEL, ALL)
    assert kernel_facts(ROW_KERNEL, tree) == kernel_facts(ROW_KERNEL)


def test_cell_keys_round_trip_and_grid_size():
    d = describe(ROW_KERNEL, ALL)
    assert parse_cell_key(cell_key(d)) == d
    assert grid_size(by_names(["memory", "compute"])) == 25


def test_measured_descriptors_come_from_the_evaluation():
    from evaluator import EvalResult, Status
    from evo.core.descriptors import complete

    grid = by_names(["block_size", "registers", "roofline"])
    assert describe(ROW_KERNEL, grid) == {"block_size": "256"}  # registers and roofline: after evaluation
    fast = EvalResult(status=Status.CORRECT, registers=40, roofline_fraction=0.62)
    assert complete({"block_size": "256"}, fast, grid) == {"block_size": "256", "registers": "64",
                                                          "roofline": "50"}
    assert complete({}, EvalResult(status=Status.CORRECT, registers=255, roofline_fraction=0.03), grid) == {
        "block_size": NONE, "registers": "255", "roofline": "0"}
    assert set(complete({}, EvalResult(status=Status.CRASHED), grid).values()) == {NONE}
    assert grid_size(grid) == len(DESCRIPTORS["block_size"].bins) * 5 * 6

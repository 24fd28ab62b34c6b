import ast

from evo.core.kernel_source import find_tunables, normalized_hash, with_values

SOURCE = '''
import triton
BLOCK_SIZE = 256  # tunable
NUM_WARPS = 4
NUM_STAGES = 2
not_tunable = 7
EPS = 1

def launch(kernel, x):
    kernel[(1,)](x, BLOCK_M=64, num_warps=8, num_stages=3, other=5)
'''


def test_finds_module_constants_and_launch_keywords():
    found = [(t.name, t.kind, t.value) for t in find_tunables(SOURCE)]
    assert found == [
        ("BLOCK_SIZE", "block", 256), ("NUM_WARPS", "warps", 4), ("NUM_STAGES", "stages", 2),
        ("BLOCK_M", "block", 64), ("num_warps", "warps", 8), ("num_stages", "stages", 3),
    ]


def test_grid_shape_constants_are_tunable():
    source = "ROWS_PER_PROGRAM = 4\nPROGRAMS_PER_SM = 2\nTILES_PER_PROGRAM = 8\nGRID_M = 64\nNUM_PROGRAMS = 0\n"
    found = [(t.name, t.kind, t.value) for t in find_tunables(source)]
    assert found == [("ROWS_PER_PROGRAM", "grid", 4), ("PROGRAMS_PER_SM", "grid", 2),
                     ("TILES_PER_PROGRAM", "grid", 8), ("GRID_M", "grid", 64)]


def test_with_values_rewrites_only_the_literals():
    tunables = {t.name: t for t in find_tunables(SOURCE)}
    new = with_values(SOURCE, {tunables["BLOCK_SIZE"]: 1024, tunables["num_warps"]: 2})
    assert "BLOCK_SIZE = 1024  # tunable" in new
    assert "num_warps=2, num_stages=3" in new
    assert new.count("\n") == SOURCE.count("\n")


def test_non_ascii_source_offsets():
    source = "# café — ünïcode\nBLOCK_SIZE = 128  # ß\n"
    (t,) = find_tunables(source)
    assert with_values(source, {t: 64}) == "# café — ünïcode\nBLOCK_SIZE = 64  # ß\n"


def test_unparsable_source_has_no_tunables():
    assert find_tunables("def (:") == []


def test_normalized_hash_ignores_comments_and_formatting():
    a = "x = 1\n\n# comment\ny = x  +  2\n"
    b = "x = 1\ny = x + 2  # other comment\n"
    assert normalized_hash(a) == normalized_hash(b)
    assert normalized_hash(a) != normalized_hash("x = 2\ny = x + 2\n")
    assert normalized_hash(a, ast.parse(b)) == normalized_hash(a)  # a tree parsed by the caller is used as is


def test_a_switch_between_two_code_paths_is_tunable_at_zero_too_and_moves_by_flipping():
    import numpy as np

    from operators.constants import neighbour
    from operators.sweep import neighbours

    source = "K0_USE_TAPS_LOOP = 1\nK1_USE_TAPS_LOOP = 0\nUSE_X = 2\nNUM_WARPS = 0\n"
    found = [(t.name, t.kind, t.value) for t in find_tunables(source)]
    # 2 is no switch's value, and zero stays untunable for the other kinds
    assert found == [("K0_USE_TAPS_LOOP", "switch", 1), ("K1_USE_TAPS_LOOP", "switch", 0)]
    on, off = find_tunables(source)
    assert {neighbour(on, np.random.default_rng(s)) for s in range(8)} == {0}
    assert {neighbour(off, np.random.default_rng(s)) for s in range(8)} == {1}
    assert [note for note, _ in neighbours(source)] == ["sweep: K0_USE_TAPS_LOOP 1->0", "sweep: K1_USE_TAPS_LOOP 0->1"]

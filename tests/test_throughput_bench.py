"""The throughput benchmark's candidates (experiments/throughput_bench.py): children proposed from
an evaluated seed as a search proposes them, and what the record keeps of each."""
import re
import sys
from pathlib import Path

import numpy as np

from evaluator import EvalResult, Status

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))  # the script imports its neighbours bare, as when run there
import throughput_bench  # noqa: E402

SEED = (ROOT / "evo" / "suite" / "seeds" / "matmul_fp16.py").read_text()
TASK = (ROOT / "evo" / "suite" / "matmul_fp16.py").read_text()


def _setting(source: str, name: str) -> int:
    return int(re.search(rf"^{name} = (\d+)", source, re.M).group(1))


def test_children_of_a_seed_that_spills_keep_its_warps_and_blocks():
    spills = EvalResult(status=Status.CORRECT, reason="ok", speedup=1.0, spills=50)
    children = throughput_bench.variants_of("matmul_fp16", TASK, SEED, 30, np.random.default_rng(0), spills)
    assert len(children) == 30 and all(task == "matmul_fp16" and src == TASK for task, src, _ in children)
    for _, _, child in children:
        assert _setting(child, "NUM_WARPS") >= _setting(SEED, "NUM_WARPS")
        for block in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
            assert _setting(child, block) <= _setting(SEED, block)
    # Without a result (the fixed variants), the operator also proposes fewer warps.
    free = throughput_bench.variants_of("matmul_fp16", TASK, SEED, 30, np.random.default_rng(0))
    assert any(_setting(child, "NUM_WARPS") < _setting(SEED, "NUM_WARPS") for _, _, child in free)


def test_the_record_keeps_the_lines_a_child_changed():
    child = SEED.replace("NUM_WARPS = 4      # 1..32", "NUM_WARPS = 8      # 1..32")
    assert throughput_bench.changed_lines(SEED, child) == ["NUM_WARPS = 8      # 1..32 (launch parameter)"]
    assert throughput_bench.changed_lines(SEED, SEED) == []

"""experiments/sass_loops.py: the loops of the convolution kernels counted from their Hopper SASS,
without a GPU (Triton's wheel carries ptxas and cuobjdump), and what section 9 of
kernelbench_search.md reads from them.  Run as its own process: the suite imports Triton in its
interpreter mode, in which nothing compiles for a GPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
ROOT = Path(__file__).parents[1]
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (TOOLS / "ptxas").exists() or not (TOOLS / "cuobjdump").exists(),
                                 reason="Triton's wheel has no ptxas/cuobjdump here")]


def test_the_taps_kernels_loop_does_less_index_arithmetic_than_the_general_one():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "sass_loops.py")], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    cases = {row["case"]: row["loops"] for row in map(json.loads, out.stdout.splitlines())}
    general, taps = cases["regular, stride 1"], cases["regular, stride 1, taps kernel"]
    assert len(general) == 1 and len(taps) == 1  # one reduction loop each, pipelined
    assert general[0]["ffma"] == taps[0]["ffma"] == 2048  # the same products: 128x64x32 over 128 threads
    assert taps[0]["integer"] * 2 < general[0]["integer"]  # 252 against 1690 with triton 3.9
    # the packed weight: its tile in 16-byte copies (4 a thread, for 16 floats), the input's as before
    assert taps[0]["wide_loads"] == 4 and general[0]["wide_loads"] == 0
    assert taps[0]["loads"] == general[0]["loads"] - 12 > 0
    # taps outermost in the general kernel: only a step's few taps split into kd, kh, kw
    outermost = cases["regular, stride 1, taps outermost"]
    assert len(outermost) == 1 and outermost[0]["ffma"] == 2048
    assert outermost[0]["integer"] * 2 < general[0]["integer"]
    strided = cases["transposed, stride 2, taps kernel"]
    assert len(strided) == 1 and strided[0]["integer"] * 2 < cases["transposed, stride 2"][0]["integer"]
    # the channels-last gather compiles to one pipelined loop with 16-byte copies; how much it saves
    # depends on Triton's version (section 16 of kernelbench_search.md: Triton 3.6 against 3.9)
    for case in ("regular, stride 1, taps kernel, channels-last", "regular, stride 1, taps kernel, channels-last, TF32"):
        assert len(cases[case]) == 1 and cases[case][0]["wide_loads"] >= 2, case
    assert all(row["registers"] and row["stack_bytes"] is not None for row in map(json.loads, out.stdout.splitlines()))

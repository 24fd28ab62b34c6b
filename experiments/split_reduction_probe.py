"""Operator split_reduction on few long rows, timed on one GPU: an inductor-style looped reduction
(per row, a sum of squares and its mean) against its split child, for a few shapes.

    python3 experiments/split_reduction_probe.py --out $OUT/split_reduction_probe.json

The parent is the test suite's kernel (tests/test_split_reduction.py) at the shapes below, one row
a program (XBLOCK 1, R0_BLOCK 2048, 8 warps); the child is the operator's first, then each
K<n>_SPLIT_R0 of a small sweep.  Medians of ``triton.testing.do_bench``; each child's outputs are
compared with the parent's.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from evo.core.program import Program  # noqa: E402
from operators import Context  # noqa: E402
from operators.split_reduction import SplitReduction  # noqa: E402
from tests.test_split_reduction import SEED, SUM  # noqa: E402

SHAPES = [(1, 1 << 24), (8, 1 << 22), (64, 1 << 20), (512, 1 << 16)]


def _module(source: str, name: str):
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows_out = []
    for rows, row in SHAPES:
        seed = (SEED.format(rows=rows, row=row, **SUM).replace("K0_ROWS_PER_PROGRAM = 2", "K0_ROWS_PER_PROGRAM = 1")
                .replace("K0_BLOCK_R0 = 256", "K0_BLOCK_R0 = 2048").replace("K0_NUM_WARPS = 4", "K0_NUM_WARPS = 8"))
        parent = Program(id=0, task="t", island=0, generation=0, operator="seed", source=seed)
        proposal = SplitReduction().propose(Context(task_name="t", task_source="", parent=parent),
                                            np.random.default_rng(0))
        x = torch.randn(rows, row, device="cuda")
        base = _module(seed, f"parent_{rows}")
        expected = base._call(x)
        result = {"rows": rows, "row": row, "note": proposal.note,
                  "parent_ms": triton.testing.do_bench(lambda: base._call(x), return_mode="median"), "children": []}
        first = int(proposal.source.split("K0_SPLIT_R0 = ")[1].split("\n")[0])
        for split in sorted({first, 8, 32, 128, 256}):
            child = _module(proposal.source.replace(f"K0_SPLIT_R0 = {first}", f"K0_SPLIT_R0 = {split}"),
                            f"child_{rows}_{split}")
            got = child._call(x)
            error = max(((g - e).abs().max() / e.abs().max()).item() for g, e in zip(got, expected))
            ms = triton.testing.do_bench(lambda: child._call(x), return_mode="median")
            result["children"].append({"split": split, "first": split == first, "ms": ms, "rel_error": error})
        best = min(result["children"], key=lambda c: c["ms"])
        print(f"{rows} x {row}: parent {result['parent_ms']:.3f} ms; first child (split {first}) "
              f"{next(c['ms'] for c in result['children'] if c['first']):.3f} ms; best {best['ms']:.3f} ms "
              f"(split {best['split']})", flush=True)
        rows_out.append(result)
    meta = {"command": " ".join(["python3", *sys.argv]), "device": torch.cuda.get_device_name(),
            "torch": torch.__version__, "triton": triton.__version__}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows_out}, indent=1))


if __name__ == "__main__":
    main()

"""The split-K operator on a GPU: a GEMM template seed with few output tiles and a long K against
its split children and cuBLAS, in fp32 (IEEE products, as under the strict tolerance).

The seed is inductor's GEMM template captured in ``tests/data/inductor/`` made into a seed for
fixed extents (as KernelBench's fixed shapes make it), its output in fp32, at one tile; the
children are ``operators.split_k``'s rewrite of it at several SPLIT_K.  Shapes: KernelBench level
1's ``Matmul_with_large_K_dimension`` (M = N = 256, K = 524288) and ``Matrix_vector_multiplication``
(M = 2048, N = 1, K = 1048576), whose seeds ran at 0.014x torch.compile and failed the fp32 check
(experiments/kernelbench_seeds.md).  Error: the largest |out - ref| / (atol + rtol |ref|) against
an fp64 product, atol = rtol = 1e-4 (the strict check passes at 1 or less).

    python3 experiments/split_k_bench.py --out split_k.json
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evaluator.compile_seed import seed_from_inductor  # noqa: E402
from evo.core.program import Program  # noqa: E402
from evo.core.task import load_tasks  # noqa: E402
from operators import Context  # noqa: E402
from operators.split_k import SplitK  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "inductor"
INPUTS = ["L['A'].size()[0]", "L['A'].size()[1]", "L['A']", "L['B'].size()[1]", "L['B']"]
SHAPES = {"large_k": (256, 256, 524288), "matvec": (2048, 1, 1048576)}


def seed(m: int, n: int, k: int, tile=(64, 64, 32), warps=4, stages=3) -> str:
    code = (DATA / "matmul_fp16_template.py.txt").read_text()
    code = code.replace("    M = ks0\n", f"    M = {m}\n").replace("    N = ks1\n", f"    N = {n}\n")
    code = code.replace("    K = ks2\n", f"    K = {k}\n")
    source = seed_from_inductor(code, INPUTS, load_tasks("default", names=["matmul_fp16"])[0].source)
    source = source.replace("torch.float16)", "torch.float32)")  # the output buffer, for fp32 operands
    for name, value in zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), tile):
        source = re.sub(rf"^K0_{name} = \d+$", f"K0_{name} = {value}", source, flags=re.M)
    source = re.sub(r"^K0_NUM_WARPS = \d+$", f"K0_NUM_WARPS = {warps}", source, flags=re.M)
    return re.sub(r"^K0_NUM_STAGES = \d+$", f"K0_NUM_STAGES = {stages}", source, flags=re.M)


def model(source: str):
    import importlib.util
    import tempfile
    path = Path(tempfile.mkdtemp()) / "candidate.py"  # Triton reads a kernel's source from its file
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"candidate_{abs(hash(source))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ModelNew().cuda()


def error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float(((out.double() - ref).abs() / (1e-4 + 1e-4 * ref.abs())).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="split_k.json")
    parser.add_argument("--splits", type=int, nargs="+", default=[8, 32, 64, 128])
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for label, (m, n, k) in SHAPES.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(m, k, device="cuda", generator=gen)
        b = torch.randn(k, n, device="cuda", generator=gen)
        ref = a.double() @ b.double()
        parent = seed(m, n, k)
        proposal = SplitK().propose(Context(task_name=label, task_source="", parent=Program(
            id=1, task=label, island=0, generation=0, operator="seed", source=parent)), np.random.default_rng(0))
        variants = {"cuBLAS": lambda a, b: a @ b, "seed": model(parent)}
        for split in args.splits:
            child = re.sub(r"^K0_SPLIT_K = \d+$", f"K0_SPLIT_K = {split}", proposal.source, flags=re.M)
            variants[f"split {split}"] = model(child)
        for name, fn in variants.items():
            try:
                out = fn(a, b)
                ms = triton.testing.do_bench(lambda: fn(a, b), warmup=25, rep=200, return_mode="median")
                rows.append({"shape": label, "M": m, "N": n, "K": k, "kernel": name, "ms": ms, "error": error(out, ref)})
            except Exception as exc:  # a variant that fails to compile or run is reported, not fatal
                rows.append({"shape": label, "kernel": name, "failed": f"{type(exc).__name__}: {exc}"[:300]})
            print(json.dumps(rows[-1]), flush=True)
        rows.append({"shape": label, "operator_note": proposal.note})
    Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                          "triton": triton.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

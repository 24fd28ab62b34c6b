"""A candidate's compile and run cost outside the evaluator: its first call (Triton's JIT compile and
one run), three more calls, and each Triton kernel's registers and spills (throughput_bench.md, round 10).

    TRITON_CACHE_DIR=/tmp/empty python3 experiments/compile_probe.py PROBLEM.py CANDIDATE.py [...]

One process per candidate is what tells compile time apart: a kernel compiled by an earlier
candidate (same cache) costs nothing.  Prints one JSON line per candidate.  Trusted code only: it
runs the candidate in this process, with none of the evaluator's checks.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import torch


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernels_of(module) -> dict:
    """Registers and spills of every compiled specialisation of the module's Triton kernels."""
    found = {}
    for name in dir(module):
        kernel = getattr(module, name)
        for caches in getattr(kernel, "device_caches", {}).values():
            for compiled in caches[0].values():
                found[name] = {"registers": getattr(compiled, "n_regs", None),
                               "spills": getattr(compiled, "n_spills", None),
                               "warps": compiled.metadata.num_warps}
    return found


def probe(problem_path: str, candidate_path: str, calls: int = 3) -> dict:
    problem, candidate = load(problem_path, "problem"), load(candidate_path, "candidate")
    torch.manual_seed(0)
    model = candidate.ModelNew(*problem.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    began = time.perf_counter()
    model(*inputs)
    torch.cuda.synchronize()
    first = time.perf_counter() - began
    each = []
    for _ in range(calls):
        began = time.perf_counter()
        model(*inputs)
        torch.cuda.synchronize()
        each.append(time.perf_counter() - began)
    return {"candidate": Path(candidate_path).name, "first_call_s": round(first, 3),
            "call_ms": [round(1e3 * s, 2) for s in each], "kernels": kernels_of(candidate)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem")
    parser.add_argument("candidate")
    args = parser.parse_args()
    print(json.dumps(probe(args.problem, args.candidate)), flush=True)


if __name__ == "__main__":
    main()

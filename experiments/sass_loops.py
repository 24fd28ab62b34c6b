"""The instructions of a Triton kernel's loops, per iteration, from its Hopper SASS, without a GPU.

Triton's wheel carries ``ptxas`` and ``cuobjdump``: a kernel compiles for ``sm_90`` on any host, and
each backward branch of its SASS closes a loop, whose instructions are counted by kind (FFMA, the
integer ones, loads).  A proxy, not a timing: it tells where a change removes work from a hot loop
(index arithmetic, say), not what that buys on the GPU.

    python3 experiments/sass_loops.py [--old REV]   # the convolution kernels (evaluator.conv_library)

With ``--old REV`` the same cases are counted for ``evaluator/conv_kernel.py`` at that git revision
(``git show``), side by side.  Prints one JSON object per case and kernel, with the registers a
thread and the stack (spills) ``cuobjdump -res-usage`` reports.

Counts depend on Triton's version: compile with the device's (``pip install --no-deps --target
/tmp/t36 triton==3.6.0``, then ``PYTHONPATH=/tmp/t36``).  With this machine's Triton 3.9 the taps
kernel's 128 x 64 TF32 tile used 255 registers and spilled, where Triton 3.6 here and on the H200
used 226 and spilled nothing (``experiments/kernelbench_search.md``, section 16).
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compile for the GPU, not the interpreter

INT_OPS = ("IMAD", "IADD", "LOP", "SHF", "ISETP", "LEA", "SEL", "IABS", "PRMT", "IMNMX", "I2F", "F2I", "IMUL")


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _with_dots(module, precision: str):
    """``module`` (a version of the convolution's kernels) with its IEEE dots in ``precision``."""
    text = Path(module.__file__).read_text().replace('input_precision="ieee"', f'input_precision="{precision}"')
    path = Path(tempfile.mkdtemp()) / f"{module.__name__}_{precision}.py"
    path.write_text(text)
    return _module(path, f"{module.__name__}_{precision}")


def loops(kernel, constants: dict, num_warps: int = 4, num_stages: int = 3) -> list[dict]:
    """Per loop of ``kernel`` (a ``@triton.jit`` function; pointers fp32, other arguments int32,
    ``constants`` its constexprs), its instructions by kind, innermost loops first."""
    return counts(kernel, constants, num_warps, num_stages)["loops"]


def counts(kernel, constants: dict, num_warps: int = 4, num_stages: int = 3) -> dict:
    """:func:`loops`'s count, with the kernel's registers a thread and its stack in bytes (where
    ptxas spills registers)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    constants = {k: v for k, v in constants.items() if k in kernel.arg_names}  # an older kernel takes fewer
    # a constexpr left out takes its default, as at a launch (not a runtime argument: both branches)
    constants |= {p.name: p.default for p in kernel.params
                  if p.is_constexpr and p.name not in constants and p.default is not inspect.Parameter.empty}
    signature = {n: "constexpr" if n in constants else "*fp32" if n.endswith("_ptr") else "i32"
                 for n in kernel.arg_names}
    # As at a launch, where Triton marks the pointers and the integers divisible by 16 (here: the
    # channel counts of KernelBench's convolutions, 32 and 64) and may vectorize loads with them.
    divisible = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in kernel.arg_names
                 if n not in constants and (n.endswith("_ptr") or n in DIVISIBLE)}
    source = ASTSource(fn=kernel, signature=signature, attrs=divisible,
                       constexprs={(kernel.arg_names.index(k),): v for k, v in constants.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as scratch:
        cubin = Path(scratch) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        sass = subprocess.run([str(tools / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
        usage = subprocess.run([str(tools / "cuobjdump"), "-res-usage", str(cubin)], capture_output=True,
                               text=True, check=True).stdout
    code = [(int(m.group(1), 16), m.group(2)) for m in
            (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line) for line in sass.splitlines()) if m]
    found = []
    for address, text in code:
        target = re.search(r"BRA\s.*?0x([0-9a-f]+)", text)
        if target and int(target.group(1), 16) < address:  # a backward branch: a loop's end
            start = int(target.group(1), 16)
            body = [re.sub(r"^@!?U?P\w+\s+", "", t) for a, t in code if start <= a <= address]  # predicates off
            ops = [t.split()[0].split(".")[0] for t in body]
            kinds = collections.Counter(ops)
            found.append({"instructions": len(ops), "ffma": kinds["FFMA"], "mma": kinds["HMMA"] + kinds["HGMMA"],
                          "integer": sum(v for k, v in kinds.items() if k.startswith(INT_OPS)),
                          "loads": kinds["LDG"] + kinds["LDGSTS"], "shared_loads": kinds["LDS"],
                          "wide_loads": sum(1 for t in body if re.match(r"LDG(STS)?\.\S*(64|128)", t))})
    registers, stack = re.search(r"REG:(\d+)", usage), re.search(r"STACK:(\d+)", usage)  # spills: the stack
    return {"loops": sorted(found, key=lambda loop: loop["instructions"]),
            "registers": int(registers.group(1)) if registers else None,
            "stack_bytes": int(stack.group(1)) if stack else None}


DIVISIBLE = ("c_in", "C_group", "O_group")
GEOMETRY = dict(stride_d=1, stride_h=1, stride_w=1, pad_d=0, pad_h=0, pad_w=0, dil_d=1, dil_h=1, dil_w=1)
TILE = dict(KD=1, KH=3, KW=5, HAS_BIAS=False, IEEE=True, BLOCK_M=128, BLOCK_N=64, BLOCK_K=32)
# the taps kernel's admitted taps, this far apart, and its gather (NCHW unless a case says otherwise)
STEPS = dict(TAP_STEP_D=1, TAP_STEP_H=1, TAP_STEP_W=1, CHANNELS_LAST=False)
# how the general kernel finds a tap's input, as _convolution launches it (evaluator/conv_launch.py:
# per element where transposed with a stride, else a row's offset plus a tap's, bounds checked where a
# tap can leave the input, in int32); older kernels take none of these
UNPADDED = dict(PHASED=False, CHECK_D=False, CHECK_H=False, CHECK_W=False, OFFSETS_32=True)
CASES = {  # name: (kernel, constexprs beyond the tile); strides are runtime arguments in older kernels
    "regular, stride 1": ("_conv_kernel", dict(TRANSPOSED=False, **GEOMETRY, **UNPADDED)),
    # 8 channels a group padded to none, four taps a step of 32 (the launch's C_PAD below a step's depth)
    "regular, stride 1, taps outermost": ("_conv_kernel", dict(TRANSPOSED=False, **GEOMETRY, **UNPADDED, C_PAD=8)),
    "transposed, stride 1": ("_conv_kernel", dict(TRANSPOSED=True, **GEOMETRY, **dict(
        UNPADDED, CHECK_D=True, CHECK_H=True, CHECK_W=True))),
    "transposed, stride 2": ("_conv_kernel", dict(TRANSPOSED=True, **dict(GEOMETRY, stride_h=2, stride_w=2,
                                                                           pad_h=1, pad_w=1), **dict(
        UNPADDED, PHASED=True))),
    "regular, stride 1, split in memory": ("_conv_kernel", dict(TRANSPOSED=False, **GEOMETRY, **UNPADDED,
                                                                 SPLIT=True)),
    "regular, stride 1, taps kernel": ("_conv_taps_kernel", dict(TRANSPOSED=False, **GEOMETRY, **STEPS)),
    "transposed, stride 1, taps kernel": ("_conv_taps_kernel", dict(TRANSPOSED=True, **GEOMETRY, **STEPS)),
    "transposed, stride 2, taps kernel": ("_conv_taps_kernel", dict(TRANSPOSED=True, **dict(
        GEOMETRY, stride_h=2, stride_w=2, pad_h=1, pad_w=1), **dict(STEPS, TAP_STEP_H=2, TAP_STEP_W=2))),
    "regular, stride 1, taps kernel, channels-last": ("_conv_taps_kernel", dict(
        TRANSPOSED=False, **GEOMETRY, **dict(STEPS, CHANNELS_LAST=True))),
    # the seeds' wide tile (16 channels a step) in TF32, as dot_precision's children run it
    "regular, stride 1, taps kernel, TF32": ("_conv_taps_kernel", dict(
        TRANSPOSED=False, **GEOMETRY, **STEPS, IEEE=False, BLOCK_K=16)),
    "regular, stride 1, taps kernel, channels-last, TF32": ("_conv_taps_kernel", dict(
        TRANSPOSED=False, **GEOMETRY, **dict(STEPS, CHANNELS_LAST=True), IEEE=False, BLOCK_K=16)),
    # the strict seeds' second start in tf32x3 (evo.core.dot_precision.seed_kernels), and the same
    # three products with both operands split as they are copied
    "regular, stride 1, taps kernel, channels-last, tf32x3": ("_conv_taps_kernel", dict(
        TRANSPOSED=False, **GEOMETRY, **dict(STEPS, CHANNELS_LAST=True), BLOCK_K=16, DOTS="tf32x3")),
    "regular, stride 1, taps kernel, channels-last, split in memory": ("_conv_taps_kernel", dict(
        TRANSPOSED=False, **GEOMETRY, **dict(STEPS, CHANNELS_LAST=True), BLOCK_K=16, SPLIT=True)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="a git revision whose evaluator/conv_kernel.py to count beside")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from evaluator.conv_library import module_text  # noqa: E402 (the root on the path first)

    now = Path(tempfile.mkdtemp()) / "conv_now.py"  # the library as one module: helpers, kernels, launch
    now.write_text(module_text())
    versions = {"now": _module(now, "conv_now")}
    if args.old:  # that revision's kernels (one whose helpers are in conv_geometry.py takes this tree's)
        text = subprocess.run(["git", "-C", str(root), "show", f"{args.old}:evaluator/conv_kernel.py"],
                              capture_output=True, text=True, check=True).stdout
        old = Path(tempfile.mkdtemp()) / "conv_old.py"
        old.write_text(text)
        versions[args.old] = _module(old, "conv_old")
    for label, module in versions.items():
        for case, (name, constants) in CASES.items():
            # the library's IEEE dots in another precision, as dot_precision writes them
            kernel = getattr(_with_dots(module, constants["DOTS"]) if "DOTS" in constants else module, name, None)
            if kernel is None:
                continue
            declared = {kernel.arg_names[i] for i in kernel.constexprs}  # an older kernel's strides are runtime
            # gathers laid out for this Triton, as the launch lays them (evaluator/conv_launch.py)
            launch = {"ROWS_FIRST": module._ROWS_FIRST} if hasattr(module, "_ROWS_FIRST") else {}
            constants = {k: v for k, v in {**TILE, **launch, **constants}.items() if k in declared}
            print(json.dumps({"version": label, "case": case, "kernel": name, **counts(kernel, constants)}),
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())

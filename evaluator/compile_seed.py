"""Seed kernels derived from ``torch.compile``: inductor's Triton for a task's reference.

A task that ships no seed kernel still starts from real Triton: the
reference is compiled with dynamic shapes on the GPU (in the sandbox, since
the reference is the user's code), and inductor's output is turned into a
plain candidate module:

- each generated kernel keeps its body and loses inductor's autotuning
  decorator; its block sizes and warps become module-level tunable constants
  (``K0_BLOCK_X = 1024``, ``K0_NUM_WARPS = 4``: ``K<n>`` is the kernel's number), so the offline operators
  mutate them like any seed's, and a launcher computes its grid;
- inductor's wrapper (``call(args)``: allocations and launches) is kept, with
  its guards, device guard and stream handle removed;
- ``ModelNew`` subclasses a copy of the reference's ``Model`` renamed ``_Reference``
  (``evaluator.reference_source``: same parameters, same initialisation) and overrides ``forward`` to build ``call``'s arguments from
  the graph inputs that dynamo recorded (``L['x'].size()[0]``, a parameter,
  ...).

Matrix products are compiled to inductor's Triton templates (max-autotune over
Triton configurations only, ``evaluator.seed_capture``); a tiled GEMM's tile
becomes tunable constants too, any other template keeps inductor's tile and
grid.  Inductor's calls into cuDNN (``extern_kernels.convolution``) become
launches of the Triton convolution of ``evaluator.conv_kernel``, with tunable
tiles per call site (``evaluator.conv_seed``).  Graphs that call anything else but Triton (another
``extern_kernels`` call, an aten fallback), launch a template in a way the
converter does not know, or break into several graphs give no seed, with the
reason.
"""
from __future__ import annotations

import ast
import re
import textwrap

from evaluator.conv_seed import CONV_LIBRARY, replace_convolutions
from evaluator.reference_source import NotAModel, forward_signature, reference_class

_KERNEL = re.compile(r"^(\w+) = async_compile\.triton\('(\w+)', '''(.*?)''', device_str='cuda'\)",
                     re.DOTALL | re.MULTILINE)
_DIMS = {"XBLOCK": ("xnumel", 0), "YBLOCK": ("ynumel", 1), "ZBLOCK": ("znumel", 2),
         "R0_BLOCK": ("r0_numel", None), "R1_BLOCK": ("r1_numel", None)}
_DEFAULTS = {  # block sizes and warps to start from, by inductor's kernel kind
    "pointwise": {"XBLOCK": 1024, "YBLOCK": 32, "ZBLOCK": 16, "NUM_WARPS": 4},
    "reduction": {"XBLOCK": 1, "R0_BLOCK": 2048, "R1_BLOCK": 16, "NUM_WARPS": 8},
    "persistent_reduction": {"XBLOCK": 1, "NUM_WARPS": 8},
}
_DROP = re.compile(r"^\s*(assert_size_stride|assert_alignment)\(|^\s*torch\.cuda\.set_device\(|"
                   r"^\s*stream\d+ = get_raw_stream\(|^\s*args\.clear\(\)")


_HEADER_IMPORTS = ("import torch", "import torch.nn as nn", "import triton", "import triton.language as tl")


# The Triton convolution that replaces inductor's calls into cuDNN, as the text a seed carries.


class NoSeed(Exception):
    """Inductor's output cannot become a seed kernel (the message says why)."""


def kernels_of(code: str) -> list[tuple[str, str]]:
    """``(name, source)`` of every Triton kernel in inductor's output module."""
    return [(var, src) for var, _, src in _KERNEL.findall(code)]


def _signature(fn: ast.FunctionDef) -> tuple[list[str], list[str]]:
    """(runtime parameters, constexpr parameters) of a kernel."""
    runtime, constexpr = [], []
    for arg in fn.args.args:
        is_constexpr = arg.annotation is not None and ast.unparse(arg.annotation).endswith("constexpr")
        (constexpr if is_constexpr else runtime).append(arg.arg)
    return runtime, constexpr


def _heuristic(fn: ast.FunctionDef) -> str | None:
    """The kind of inductor kernel ``fn`` is (``pointwise``, ``reduction``, ``template``, ...)."""
    return next((ast.unparse(d.func).rsplit(".", 1)[-1] for d in fn.decorator_list
                 if isinstance(d, ast.Call) and "triton_heuristics" in ast.unparse(d.func)), None)


def convert_kernel(index: int, name: str, source: str, config: dict | None = None) -> tuple[str, str, str]:
    """(tunable constants, plain ``@triton.jit`` kernel, launcher) for one generated kernel.

    ``config``: the launch configuration inductor's autotuning chose for it
    (``evaluator.seed_capture``: ``{"kwargs": {"XBLOCK": ...}, "num_warps", "num_stages"}``), the
    constants' starting values; without one, generic values by the kernel's kind.
    Other ``@triton.jit`` functions in its source (the combine function of a scan) come
    along, renamed for this kernel: another kernel's helper may share the name."""
    tree = ast.parse(source)
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    fn = next((f for f in functions if _heuristic(f)), functions[-1] if functions else None)
    if fn is None:
        raise NoSeed(f"kernel {name}: no function in its source")
    helpers = [f for f in functions if f is not fn]
    if not helpers:
        return _convert_main(index, name, source, fn, config)
    for helper in helpers:  # identifiers only: line numbers stay as parsed
        source = re.sub(rf"\b{helper.name}\b", f"_k{index}{helper.name}", source)
    lines = source.splitlines()
    texts = ["\n".join(lines[min([h.lineno, *(d.lineno for d in h.decorator_list)]) - 1:h.end_lineno]) for h in helpers]
    constants, kernel, launcher = _convert_main(index, name, source, ast.parse(source).body[tree.body.index(fn)],
                                                config)
    products = [f"_k{index}{h.name}" for h in helpers if _is_product(h)]
    widened = _products_in_float64(kernel, products)
    if widened != kernel:  # see _products_in_float64: at most 4 warps
        constants = re.sub(rf"^(K{index}_NUM_WARPS = )(\d+)$", lambda m: m.group(1) + str(min(int(m.group(2)), 4)),
                           constants, flags=re.M)
    return constants, "\n\n\n".join([*texts, widened]), launcher


def _is_product(helper: ast.FunctionDef) -> bool:
    """Whether a scan's combine function multiplies its two operands (inductor's cumprod)."""
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) for n in ast.walk(helper)) and \
        [a.arg for a in helper.args.args] == ["arg0_0", "arg1_0"]


def _products_in_float64(kernel: str, products: list[str]) -> str:
    """``kernel`` with each scan by a product combine run in float64, its carry too; stores cast back.
    A running product over fp32 leaves fp32's range and comes back in an order of its own: inductor's
    scan multiplies a block's underflowed prefix (0) by another's overflowed one (Inf), NaN where a
    product in order has 0 (level1/90 on mixed scales: ``evaluator.float64_arbiter``).  In float64 it
    gives the float64 answer.  Its values take twice the registers: on one H200 level1/90's scan in
    float64 took 1.17x torch.compile's time at inductor's 16 warps, 0.84-0.91x at 4 with any block
    of 512-8192, 0.96-1.02x at 8 (experiments/data/cumprod_sweep_h200_s54.json)."""
    if not products:
        return kernel
    scans = re.compile(rf"tl\.associative_scan\(\((\w+),\), (\w+), ({'|'.join(map(re.escape, products))})\)")
    widened = scans.sub(r"tl.associative_scan((\1.to(tl.float64),), \2, \3)", kernel)
    if widened == kernel:
        return kernel
    # A looped scan carries its prefix from block to block, started as NaN in fp32: now float64.
    return widened.replace("float('nan'), tl.float32)", "float('nan'), tl.float64)")


def _starting_values(kind: str, config: dict | None) -> dict[str, int]:
    """Block sizes and warps (and stages, where known) to start from: inductor's chosen ones."""
    values = dict(_DEFAULTS[kind])
    if config:
        values.update({k: v for k, v in (config.get("kwargs") or {}).items() if k in _DIMS and v > 0})
        for key in ("num_warps", "num_stages"):
            if isinstance(config.get(key), int) and config[key] > 0:
                values[key.upper()] = config[key]
    return values


def _convert_main(index: int, name: str, source: str, fn: ast.FunctionDef,
                  config: dict | None = None) -> tuple[str, str, str]:
    kind = _heuristic(fn) or "pointwise"
    if kind == "template":
        return convert_template(index, name, source, fn)
    if kind not in _DEFAULTS:
        raise NoSeed(f"kernel {name}: inductor's {kind} kernels are not supported as seeds")
    runtime, constexpr = _signature(fn)
    unknown = [c for c in constexpr if c not in _DIMS]
    if unknown:
        raise NoSeed(f"kernel {name}: unknown compile-time parameters {unknown}")
    lines = source.splitlines()
    body = "\n".join(lines[fn.lineno - 1:fn.end_lineno])  # the def and its body, without decorators
    defaults = _starting_values(kind, config)
    constants, launch_kw, grid = [], [], ["1", "1", "1"]
    for block in constexpr:
        numel, axis = _DIMS[block]
        if numel not in runtime:
            raise NoSeed(f"kernel {name}: {block} without {numel}")
        if kind == "persistent_reduction" and axis is None:
            launch_kw.append(f"{block}=triton.next_power_of_2({numel})")  # the whole row in one block
        else:
            # Names the offline mutation knows: rows per program (1..1024) for a reduction's
            # XBLOCK, block sizes (16..8192) otherwise.
            constant = (f"K{index}_ROWS_PER_PROGRAM" if block == "XBLOCK" and kind != "pointwise"
                        else f"K{index}_BLOCK_{block.replace('BLOCK', '').rstrip('_')}")
            constants.append(f"{constant} = {defaults[block]}")
            launch_kw.append(f"{block}={constant}")
        if axis is not None:
            grid[axis] = f"triton.cdiv({numel}, {launch_kw[-1].split('=', 1)[1]})"
    for numel, axis in (("xnumel", 0), ("ynumel", 1), ("znumel", 2)):
        if numel in runtime and grid[axis] == "1":  # no block parameter: one program per element
            grid[axis] = numel
    constants.append(f"K{index}_NUM_WARPS = {defaults['NUM_WARPS']}")
    launch_kw.append(f"num_warps=K{index}_NUM_WARPS")
    if "NUM_STAGES" in defaults:
        constants.append(f"K{index}_NUM_STAGES = {defaults['NUM_STAGES']}")
        launch_kw.append(f"num_stages=K{index}_NUM_STAGES")
    params = ", ".join(runtime)
    launcher = (f"def _launch_{index}({params}):\n"
                f"    grid = ({', '.join(grid)},)\n"
                f"    {fn.name}[grid]({params}, {', '.join(launch_kw)})\n")
    return "\n".join(constants), "@triton.jit\n" + body + "\n", launcher


def convert_template(index: int, name: str, source: str, fn: ast.FunctionDef) -> tuple[str, str, str]:
    """(tunable constants, kernel, launcher) for one of inductor's templates (``max_autotune``).

    A template fixes its tile (``BLOCK_M : tl.constexpr = 64`` in its body) and its launch
    (num_warps, num_stages in the decorator) to the configuration inductor's autotuning chose.
    In inductor's tiled GEMM the tile becomes compile-time parameters fed from module
    constants, and the launcher recomputes the grid (tiles of M times tiles of N) from them.
    A GEMM specialised to K divisible by its BLOCK_K (``EVEN_K``) keeps that BLOCK_K.  Any other
    template with a fixed grid (a convolution, say) keeps its tile and the wrapper's grid; only its
    warps and stages are tunable.
    """
    decorator = next(d for d in fn.decorator_list if isinstance(d, ast.Call))
    launch = {kw.arg: ast.literal_eval(kw.value) for kw in decorator.keywords if kw.arg in ("num_warps", "num_stages")}
    runtime, constexpr = _signature(fn)
    if constexpr or set(launch) != {"num_warps", "num_stages"} or "'grid_type': 'FixedGrid'" not in source:
        raise NoSeed(f"kernel {name}: a template whose launch the converter does not understand")
    pinned = {stmt.target.id: stmt for stmt in fn.body if isinstance(stmt, ast.AnnAssign)
              and isinstance(stmt.target, ast.Name) and ast.unparse(stmt.annotation).endswith("constexpr")}
    assigned = {stmt.targets[0].id: ast.unparse(stmt.value) for stmt in fn.body
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)}
    tile = [c for c in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M") if c in pinned]
    # M and N: the kernel's parameters, or literals where inductor compiled for static shapes
    extent = {d: assigned.get(d) for d in ("M", "N")
              if assigned.get(d) in runtime or str(assigned.get(d)).isdigit()}
    retiled = tile[:2] == ["BLOCK_M", "BLOCK_N"] and len(extent) == 2 and "grid_m = (M + BLOCK_M - 1) // BLOCK_M" in source
    if not retiled:
        tile = []
    elif ast.unparse(getattr(pinned.get("EVEN_K"), "value", ast.Constant(False))) != "False":
        # specialised to K divisible by its BLOCK_K, the loads along K may have no mask: another
        # BLOCK_K could read past K, so it stays as inductor chose it (rows and columns wrap or are masked)
        tile.remove("BLOCK_K")
    lines = source.splitlines()
    dropped = {pinned[c].lineno for c in tile}
    body = [line for number, line in enumerate(lines[fn.body[0].lineno - 1:fn.end_lineno], fn.body[0].lineno)
            if number not in dropped]
    params = ", ".join(runtime)
    kernel = "\n".join([f"def {fn.name}({', '.join([*runtime, *(f'{c}: tl.constexpr' for c in tile)])}):", *body])
    constants = [f"K{index}_{c} = {ast.unparse(pinned[c].value)}" for c in tile]
    constants += [f"K{index}_NUM_WARPS = {launch['num_warps']}", f"K{index}_NUM_STAGES = {launch['num_stages']}"]
    launch_kw = ", ".join([*(f"{c}=K{index}_{c}" for c in tile), f"num_warps=K{index}_NUM_WARPS",
                           f"num_stages=K{index}_NUM_STAGES"])
    if retiled:
        grid = ("    # inductor's grid was for its own tile; axes 1 and 2 (a batch) do not depend on it\n"
                f"    grid = (triton.cdiv({extent['M']}, K{index}_BLOCK_M) * triton.cdiv({extent['N']}, "
                f"K{index}_BLOCK_N), _grid_1, _grid_2)\n")
    else:
        grid = "    grid = (_grid_0, _grid_1, _grid_2)  # inductor's, for the tile pinned in the kernel\n"
    launcher = (f"def _launch_{index}({params}, _grid_0=None, _grid_1=1, _grid_2=1):\n{grid}"
                f"    {fn.name}[grid]({params}, {launch_kw})\n")
    return "\n".join(constants), "@triton.jit\n" + kernel + "\n", launcher


_NOT_TRITON = re.compile(r"\b(extern_kernels\.\w+|aten\.[\w.]+|torch\.ops\.[\w.]+|alloc_from_pool|empty_strided_cpu"
                         r"|cpp_fused\w*)")


def _wrapper_body(code: str, launchers: dict[str, str], conv_precision: str = "ieee") -> tuple[str, list[str], list[str]]:
    """The body of inductor's ``call(args)``, made to run outside inductor, and the tunable
    constants and launchers of the convolutions it now launches in Triton (products in
    ``conv_precision``)."""
    tree = ast.parse(code)
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "call"), None)
    if call is None:
        raise NoSeed("inductor's output has no call(args) wrapper")
    lines = code.splitlines()[call.body[0].lineno - 1:call.end_lineno]
    text = textwrap.dedent("\n".join(line for line in lines if not line.strip().startswith("#")))
    lines, constants, conv_launchers = replace_convolutions(text.splitlines(), len(launchers), conv_precision)
    for line in lines:
        found = None if _DROP.match(line) else _NOT_TRITON.search(line)  # asserts name the op they check
        if found:
            raise NoSeed(f"the compiled graph calls {found.group(1)} besides Triton kernels")
    out = []
    for line in lines:
        if _DROP.match(line):
            continue
        line = re.sub(r"with torch\.cuda\._DeviceGuard\(\d+\):", "if True:", line)
        line = line.replace("empty_strided_cuda(", "_empty(").replace("reinterpret_tensor(", "torch.as_strided(")
        match = re.match(r"^(\s*)(\w+)\.run\((.*), stream=stream\d+\)\s*$", line)
        if match:
            indent, kernel, args = match.groups()
            if kernel not in launchers:
                raise NoSeed(f"the wrapper launches {kernel}, which is not among the kernels")
            line = f"{indent}{launchers[kernel]}({args})"
        elif ".run(" in line:
            raise NoSeed(f"a launch the converter does not understand: {line.strip()[:120]}")
        out.append(line)
    return "\n".join(out), constants, conv_launchers


def _argument(source_name: str, forward_params: list[str]) -> str:
    """A graph input recorded by dynamo (``L['x'].size()[0]``) as an expression in ``forward``."""
    expr = source_name.replace("L['self']", "self")
    for param in forward_params:
        expr = expr.replace(f"L['{param}']", param)
    if "L[" in expr or "G[" in expr or not expr:
        raise NoSeed(f"the graph input {source_name} is not the module, its parameters or forward's arguments")
    return expr


def seed_from_inductor(code: str, graph_inputs: list[str], task_source: str, *, origin: str = "",
                       configs: dict[str, dict] | None = None, conv_precision: str = "ieee") -> str:
    """A candidate module (defining ``ModelNew``) from inductor's output and dynamo's graph inputs;
    ``configs``: per kernel, the launch configuration inductor's autotuning chose
    (``evaluator.seed_capture.capture``); ``conv_precision``: the products of the Triton
    convolution that replaces inductor's calls into cuDNN (``evaluator.fp32_precision.convolution_precision``)."""
    constants, definitions, launchers = [], [], {}
    for index, (name, source) in enumerate(kernels_of(code)):
        consts, kernel, launcher = convert_kernel(index, name, source, (configs or {}).get(name))
        constants.append(consts)
        definitions.append(kernel + "\n\n" + launcher)
        launchers[name] = f"_launch_{index}"
    body, conv_constants, conv_launchers = _wrapper_body(code, launchers, conv_precision)
    if not definitions and not conv_launchers:
        raise NoSeed("torch.compile generated no Triton kernel for this reference")
    if conv_launchers:
        constants += conv_constants
        definitions += [CONV_LIBRARY.replace('input_precision="ieee"', f'input_precision="{conv_precision}"'),
                        *conv_launchers]
    try:
        model_source, forward_params = reference_class(task_source, skip_imports=_HEADER_IMPORTS)
    except NotAModel as exc:
        raise NoSeed(str(exc)) from exc
    arguments = ", ".join(_argument(s, forward_params) for s in graph_inputs)
    unpacked = re.search(r"^([\w, ]+) = args$", body, re.MULTILINE)
    if unpacked is None or len([a for a in unpacked.group(1).split(",") if a.strip()]) != len(graph_inputs):
        raise NoSeed(f"the wrapper's arguments do not match the {len(graph_inputs)} graph inputs")
    signature = forward_signature(task_source)  # the reference's defaults kept: forward(x) as forward(x, mask=None)
    header = (f'"""Seed kernel derived from torch.compile (inductor) of the task\'s reference{origin}.\n\n'
              "Inductor's generated Triton kernels with its autotuning removed: block sizes and warps\n"
              "are the module-level constants below, starting from the configuration inductor's\n"
              "autotuning chose for the shapes it was compiled on; every power of two in range stays\n"
              'correct."""\n')
    return "\n".join([
        header,
        "\n".join(_HEADER_IMPORTS) + "\n"
        "from torch._inductor.runtime import triton_helpers\n"
        "from triton.language import math as tl_math\n"
        "from triton.language.extra import libdevice\n",
        "# Tunable constants of kernel K<n>: block sizes and rows per program (powers of two), warps.",
        *constants, "", "",
        *(d + "\n" for d in definitions),
        "def _as_argument(value):",
        "    # dynamo passes float attributes (eps, ...) as 0-d tensors",
        "    return torch.tensor(value, dtype=torch.float64) if isinstance(value, float) else value",
        "\n",
        "def _call(args, device):",
        "    def _empty(size, stride, dtype):",
        "        return torch.empty_strided(size, stride, dtype=dtype, device=device)",
        "",
        textwrap.indent(body, "    "),
        "\n",
        model_source,
        "\n",
        "class ModelNew(_Reference):",
        "    # The reference's parameters and initialisation; forward runs the kernels above.",
        f"    def forward({signature}):",
        f"        args = [_as_argument(a) for a in ({arguments},)]",
        "        device = next(a.device for a in args if isinstance(a, torch.Tensor) and a.dim() > 0)",
        "        outputs = _call(args, device)",
        "        return outputs[0] if len(outputs) == 1 else outputs",
        "",
    ])

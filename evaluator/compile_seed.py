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
- ``ModelNew`` subclasses the reference's ``Model`` (same parameters, same
  initialisation) and overrides ``forward`` to build ``call``'s arguments from
  the graph inputs that dynamo recorded (``L['x'].size()[0]``, a parameter,
  ...).

Matrix products (and convolutions, where inductor has a Triton template for
them) are compiled to inductor's Triton templates (max-autotune over Triton
configurations only); a tiled GEMM's tile becomes
tunable constants too, any other template keeps inductor's tile and grid.
Graphs that call anything but Triton (``extern_kernels``, an aten fallback),
launch a template in a way the converter does not know, or break into several
graphs give no seed, with the reason.
"""
from __future__ import annotations

import ast
import re
import textwrap

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


def convert_kernel(index: int, name: str, source: str) -> tuple[str, str, str]:
    """(tunable constants, plain ``@triton.jit`` kernel, launcher) for one generated kernel."""
    tree = ast.parse(source)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fn is None:
        raise NoSeed(f"kernel {name}: no function in its source")
    kind = next((ast.unparse(d.func).rsplit(".", 1)[-1] for d in fn.decorator_list
                 if isinstance(d, ast.Call) and "triton_heuristics" in ast.unparse(d.func)), "pointwise")
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
    defaults = _DEFAULTS[kind]
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
    Any other template with a fixed grid (a convolution, a GEMM specialised to K divisible by
    its BLOCK_K) keeps its tile and the wrapper's grid; only its warps and stages are tunable.
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
    retiled = (tile[:2] == ["BLOCK_M", "BLOCK_N"] and assigned.get("M") in runtime and assigned.get("N") in runtime
               and "grid_m = (M + BLOCK_M - 1) // BLOCK_M" in source
               and ast.unparse(getattr(pinned.get("EVEN_K"), "value", ast.Constant(False))) == "False")
    if not retiled:
        tile = []
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
                f"    grid = (triton.cdiv({assigned['M']}, K{index}_BLOCK_M) * triton.cdiv({assigned['N']}, "
                f"K{index}_BLOCK_N), _grid_1, _grid_2)\n")
    else:
        grid = "    grid = (_grid_0, _grid_1, _grid_2)  # inductor's, for the tile pinned in the kernel\n"
    launcher = (f"def _launch_{index}({params}, _grid_0=None, _grid_1=1, _grid_2=1):\n{grid}"
                f"    {fn.name}[grid]({params}, {launch_kw})\n")
    return "\n".join(constants), "@triton.jit\n" + kernel + "\n", launcher


def _wrapper_body(code: str, launchers: dict[str, str]) -> str:
    """The body of inductor's ``call(args)``, made to run outside inductor."""
    tree = ast.parse(code)
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "call"), None)
    if call is None:
        raise NoSeed("inductor's output has no call(args) wrapper")
    lines = code.splitlines()[call.body[0].lineno - 1:call.end_lineno]
    text = textwrap.dedent("\n".join(line for line in lines if not line.strip().startswith("#")))
    for word in ("extern_kernels.", "aten.", "torch.ops.", "alloc_from_pool", "empty_strided_cpu", "cpp_fused"):
        if word in text:
            raise NoSeed(f"the compiled graph calls {word.rstrip('.(')} code besides Triton kernels")
    out = []
    for line in text.splitlines():
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
    return "\n".join(out)


def _argument(source_name: str, forward_params: list[str]) -> str:
    """A graph input recorded by dynamo (``L['x'].size()[0]``) as an expression in ``forward``."""
    expr = source_name.replace("L['self']", "self")
    for param in forward_params:
        expr = expr.replace(f"L['{param}']", param)
    if "L[" in expr or "G[" in expr or not expr:
        raise NoSeed(f"the graph input {source_name} is not the module, its parameters or forward's arguments")
    return expr


def reference_class(task_source: str) -> tuple[str, list[str]]:
    """The task's ``Model`` class source, preceded by the module-level imports and the
    assignments it uses (``EPS = 1e-6``), and its forward's parameter names."""
    tree = ast.parse(task_source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise NoSeed("the task defines no class Model")
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None or forward.args.vararg or forward.args.kwarg:
        raise NoSeed("Model.forward must take named arguments")
    used = {n.id for n in ast.walk(model) if isinstance(n, ast.Name)}
    needed = [ast.get_source_segment(task_source, n) for n in tree.body if n.lineno < model.lineno and (
        isinstance(n, (ast.Import, ast.ImportFrom)) or isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in used for t in n.targets))]
    lines = task_source.splitlines()
    first = min([forward.lineno, *(d.lineno for d in forward.decorator_list)])
    # The class without its forward: ModelNew overrides it, and the reference's computation
    # has no place in a candidate.
    kept = lines[model.lineno - 1:first - 1] + lines[forward.end_lineno:model.end_lineno]
    if not any(line.strip() and not line.strip().startswith("#") for line in kept[1:]):
        kept.append("    pass")
    context = [line for line in needed if line not in _HEADER_IMPORTS]
    return "\n".join([*context, "", "", *kept]).strip("\n"), [a.arg for a in forward.args.args[1:]]


def seed_from_inductor(code: str, graph_inputs: list[str], task_source: str, *, origin: str = "") -> str:
    """A candidate module (defining ``ModelNew``) from inductor's output and dynamo's graph inputs."""
    kernels = kernels_of(code)
    if not kernels:
        _wrapper_body(code, {})  # says what it calls instead, if it can tell
        raise NoSeed("torch.compile generated no Triton kernel for this reference")
    constants, definitions, launchers = [], [], {}
    for index, (name, source) in enumerate(kernels):
        consts, kernel, launcher = convert_kernel(index, name, source)
        constants.append(consts)
        definitions.append(kernel + "\n\n" + launcher)
        launchers[name] = f"_launch_{index}"
    body = _wrapper_body(code, launchers)
    model_source, forward_params = reference_class(task_source)
    arguments = ", ".join(_argument(s, forward_params) for s in graph_inputs)
    unpacked = re.search(r"^([\w, ]+) = args$", body, re.MULTILINE)
    if unpacked is None or len([a for a in unpacked.group(1).split(",") if a.strip()]) != len(graph_inputs):
        raise NoSeed(f"the wrapper's arguments do not match the {len(graph_inputs)} graph inputs")
    params = ", ".join(forward_params)
    header = (f'"""Seed kernel derived from torch.compile (inductor) of the task\'s reference{origin}.\n\n'
              "Inductor's generated Triton kernels with its autotuning removed: block sizes and warps\n"
              'are the module-level constants below; every power of two in range stays correct."""\n')
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
        model_source.replace("class Model(", "class _Reference(", 1),
        "\n",
        "class ModelNew(_Reference):",
        "    # The reference's parameters and initialisation; forward runs the kernels above.",
        f"    def forward(self, {params}):",
        f"        args = [_as_argument(a) for a in ({arguments},)]",
        "        device = next(a.device for a in args if isinstance(a, torch.Tensor) and a.dim() > 0)",
        "        outputs = _call(args, device)",
        "        return outputs[0] if len(outputs) == 1 else outputs",
        "",
    ])


def _source_name(node) -> str:
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is None:
        raise NoSeed(f"dynamo recorded no source for the graph input {node.name}")
    name = source.name
    return name() if callable(name) else name


def capture(reference, inputs: list) -> tuple[str, list[str]]:
    """Inductor's output module for ``reference(*inputs)`` compiled with dynamic shapes, and the
    sources of its graph inputs in dynamo's order (that of the wrapper's ``call(args)``).

    Dynamo may compile more than once (a recompilation, a graph break): a second call
    shows which graphs really run, and exactly one must.
    """
    from unittest import mock

    import torch
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    graphs: list[dict] = []

    def backend(gm, example_inputs):
        first = len(codes)
        compiled = compile_fx(gm, example_inputs)
        graph = {"inputs": [_source_name(n) for n in gm.graph.nodes if n.op == "placeholder"],
                 "codes": codes[first:], "calls": 0}
        graphs.append(graph)

        def counted(*args):
            graph["calls"] += 1
            return compiled(*args)
        return counted

    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    try:
        import torch.fx.experimental._config as fx_config

        # Without duck sizing, two dimensions of equal size still get separate symbols:
        # a kernel must not assume rows == cols because the example happened to.
        fx_config.use_duck_shape = False
    except (ImportError, AttributeError):
        pass
    # A matrix product becomes one of inductor's Triton GEMM templates (the fastest of its
    # configurations, benchmarked here) rather than a call into cuBLAS.
    gemm = {"max_autotune_gemm": True, "max_autotune_gemm_backends": "TRITON", "autotune_fallback_to_aten": False}
    compiled = torch.compile(reference, backend=backend, dynamic=True)
    with torch.no_grad(), mock.patch.object(GraphLowering, "save_output_code", staticmethod(codes.append)), \
            inductor_config.patch({k: v for k, v in gemm.items() if hasattr(inductor_config, k)}):
        compiled(*inputs)
        for graph in graphs:
            graph["calls"] = 0
        compiled(*inputs)
    used = [g for g in graphs if g["calls"]]
    if len(used) != 1 or len(used[0]["codes"]) != 1:
        raise NoSeed(f"torch.compile runs the reference as {len(used)} graphs "
                     f"({len(graphs)} compiled): a seed needs exactly one")
    return used[0]["codes"][0], used[0]["inputs"]

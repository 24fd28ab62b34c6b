"""Capturing inductor's output for a reference, compiled so that as much as possible is Triton.

Runs in the sandbox on a GPU (the reference is the user's code).  The reference is compiled
for the shapes it is timed on (with dynamic shapes where the task has several shape sets, so
the seed holds on all of them), inductor autotunes each kernel on those shapes as torch.compile
does, and the configuration it chose is read back from the kernel it ran: the seed starts
from inductor's own tuning.  Inductor is steered away from what a seed cannot use:

- inductor's analysis of memory coalescing, which fails on some reductions with dynamic
  shapes, is off;
- matrix products become inductor's Triton GEMM templates (max-autotune over Triton
  configurations only) rather than cuBLAS calls, and never decompose-K (a long K as a batched
  product and a sum, whose product is aten's); a run splits K itself
  (``operators.split_k.split_seed``).  The modules max-autotune compiles to benchmark such
  subgraph choices are not the graph's output;
- convolutions stay ``extern_kernels.convolution`` calls (no autotuning between cuDNN and
  inductor's conv templates, which cover only some variants): the converter replaces every
  one with the Triton convolution of ``evaluator.conv_kernel``; tensors keep their NCHW
  layout (no layout optimisation), which that replacement writes;
- max pooling over windows larger than inductor's limit (25 elements: a 3x3x3 pool) is
  still lowered to Triton instead of falling back to aten;
- average pooling over large windows with a stride other than the window (where inductor
  falls back to aten) becomes a sum of strided slices, which inductor fuses into one kernel;
- a matrix-vector product (a product with one row or one column out) becomes a product and a
  sum, which inductor writes as a reduction rather than a GEMM template;
- attention runs as its math (matrix products and a softmax), never as a fused
  flash/efficient-attention library kernel, and inductor's pattern matcher does not fold
  that math back into one.

Warnings the reference raises while traced (``warnings.warn``, which dynamo cannot trace:
a graph break) are silenced.  Every switch is applied only where this torch version has it.
"""
from __future__ import annotations

import contextlib
from unittest import mock

from evaluator.compile_seed import NoSeed, kernels_of
from evaluator.gate import gpu_alone, host_section

_INDUCTOR_CONFIG = {
    "max_autotune_gemm": True, "max_autotune_gemm_backends": "TRITON", "autotune_fallback_to_aten": False,
    "max_autotune_conv_backends": "ATEN", "layout_optimization": False, "force_layout_optimization": False,
    # Its analysis fails an assertion on some reductions with dynamic shapes (torch 2.11: a
    # convolution, then a logsumexp over channels); it only picks tile shapes.
    "triton.coalesce_tiling_analysis": False,
    # Decompose-K (a GEMM with a long K as a batched product and a sum) benchmarks its bmm as
    # aten's; a seed splits K itself (operators/split_k.py).
    "triton.num_decompose_k_splits": 0,
}


# Dynamo's names for the products max-autotune may turn into benchmarked Triton templates.
_BENCHMARKED = frozenset({"matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "linear", "einsum", "tensordot",
                          "bilinear", "mv", "addmv", "dot", "inner", "outer", "chain_matmul", "__matmul__"})


def _benchmarked(node) -> bool:
    if node.op not in ("call_function", "call_method"):
        return False
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return name in _BENCHMARKED


def _known(config, key: str) -> bool:
    """Whether inductor's config has ``key`` (dotted for sub-configs) in this torch version."""
    *parents, name = key.split(".")
    for parent in parents:
        config = getattr(config, parent, None)
    return config is not None and hasattr(config, name)


def _benchmark_graph() -> bool:
    """Whether inductor is lowering a subgraph choice to benchmark it (``benchmark_<choice>``)."""
    from torch._inductor.virtualized import V

    try:
        name = V.graph.name
    except (AttributeError, AssertionError):
        return False
    return isinstance(name, str) and name.startswith("benchmark_")


def _source_name(node) -> str:
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is None:
        raise NoSeed(f"dynamo recorded no source for the graph input {node.name}")
    name = source.name
    return name() if callable(name) else name


def _avg_pool_by_slices(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                        divisor_override=None):
    """``aten.avg_pool{2,3}d`` as the mean of the window's strided slices of the padded input."""
    import itertools

    import torch

    dims = len(kernel_size)
    stride = list(stride) or list(kernel_size)
    padding = list(padding) if isinstance(padding, (list, tuple)) else [padding]
    stride, padding = (v * dims if len(v) == 1 else v for v in (stride, padding))
    window = 1
    for k in kernel_size:
        window *= k
    if window <= 25 or list(kernel_size) == stride:  # inductor lowers these to Triton itself
        return NotImplemented
    if ceil_mode or (not count_include_pad and any(padding)) or x.dim() < dims + 1:
        return NotImplemented
    pads = [p for pad in reversed(padding) for p in (pad, pad)]
    padded = torch.constant_pad_nd(x, pads, 0.0) if any(padding) else x
    sizes = [(n + 2 * p - k) // s + 1 for n, p, k, s in zip(x.shape[-dims:], padding, kernel_size, stride)]
    total = None
    for taps in itertools.product(*(range(k) for k in kernel_size)):
        part = padded
        for axis, (tap, size, step) in enumerate(zip(taps, sizes, stride)):
            dim = padded.dim() - dims + axis
            part = torch.ops.aten.slice(part, dim, tap, tap + step * (size - 1) + 1, step)
        total = part if total is None else total + part
    return total / (divisor_override or window)


def _vector_product_as_reduction(a, b):
    """``aten.mm`` with one row or one column out (a matrix-vector product) as a product and a sum:
    inductor's reduction reads the matrix once, each lane summing a stretch of K and the lanes summed
    as a tree, where its GEMM template pads the vector to a 16-wide tile and sums all of K in one
    running fp32 sum a row (KernelBench's level1/4, K = 2**20: 2e-4 off cuBLAS, twice the strict
    tolerance).  Products and sums in fp32 at least, as a GEMM accumulates.  Inductor decomposes
    so itself, but only with coordinate-descent tuning on."""
    import torch

    m, n = a.shape[0], b.shape[1]
    if not all(isinstance(v, int) for v in (m, n)) or 1 not in (m, n):
        return NotImplemented
    wide = a.dtype if a.dtype == b.dtype and a.dtype in (torch.float32, torch.float64) else torch.float32
    if n == 1:  # (M, K) @ (K, 1)
        out = (a.to(wide) * b.to(wide).reshape(1, -1)).sum(dim=1, keepdim=True)
    else:  # (1, K) @ (K, N)
        out = (a.to(wide).reshape(-1, 1) * b.to(wide)).sum(dim=0, keepdim=True)
    return out.to(a.dtype)


def _decompositions() -> dict:
    import torch
    from torch._inductor.decomposition import select_decomp_table

    aten = torch.ops.aten
    table = select_decomp_table()
    inductors_mm = table.get(aten.mm.default)

    def mm(a, b, *args, **kwargs):
        out = _vector_product_as_reduction(a, b) if not args and not kwargs else NotImplemented
        return inductors_mm(a, b, *args, **kwargs) if out is NotImplemented and inductors_mm else out

    return {**table, aten.avg_pool2d.default: _avg_pool_by_slices, aten.avg_pool3d.default: _avg_pool_by_slices,
            aten.mm.default: mm}


def _silent(*args, **kwargs) -> None:
    return None


@contextlib.contextmanager
def _lowering_switches():
    """Inductor patched for the capture: large max-pool windows and attention stay Triton."""
    import torch
    import torch._inductor.config as inductor_config
    import torch._inductor.lowering as lowering

    with contextlib.ExitStack() as stack:
        stack.enter_context(inductor_config.patch(
            {k: v for k, v in _INDUCTOR_CONFIG.items() if _known(inductor_config, k)}))
        if hasattr(lowering, "should_fallback_max_pool_with_indices"):
            stack.enter_context(mock.patch.object(lowering, "should_fallback_max_pool_with_indices",
                                                  lambda *args, **kwargs: False))
        try:
            from torch._inductor.fx_passes import fuse_attention

            if hasattr(fuse_attention, "_sfdp_init"):
                stack.enter_context(mock.patch.object(fuse_attention, "_sfdp_init", lambda *args, **kwargs: None))
        except ImportError:
            pass
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        except ImportError:
            pass
        stack.enter_context(mock.patch("warnings.warn", _silent))
        stack.enter_context(torch.no_grad())
        yield


def _chosen(kernel) -> dict | None:
    """The launch configuration inductor's autotuning settled on for one kernel (its benchmarked
    winner, or its only candidate), as ``{"kwargs", "num_warps", "num_stages"}``; None if unknown."""
    for attribute in ("launchers", "compile_results", "configs"):
        found = getattr(kernel, attribute, None) or []
        if len(found) == 1:
            config = getattr(found[0], "config", found[0])
            kwargs = getattr(config, "kwargs", None)
            if isinstance(kwargs, dict):
                return {"kwargs": {k: v for k, v in kwargs.items() if isinstance(v, int)},
                        "num_warps": getattr(config, "num_warps", None),
                        "num_stages": getattr(config, "num_stages", None)}
        if found:
            return None  # several left: not autotuned (never run)
    return None


def _configs(modules: list, code: str) -> dict[str, dict]:
    """Per kernel of ``code`` (by its variable), the configuration chosen in whichever loaded
    module ran it (inductor may load its output twice; only the one it calls was autotuned)."""
    out: dict[str, dict] = {}
    for name, _ in kernels_of(code):
        for module in modules:
            chosen = _chosen(getattr(module, name, None))
            if chosen is not None:
                out[name] = chosen
                break
    return out


def capture(reference, inputs: list, gate_fds: list[int] | None = None,
            dynamic: bool = True) -> tuple[str, list[str], dict[str, dict]]:
    """Inductor's output module for ``reference(*inputs)`` compiled with dynamic shapes (or, with
    ``dynamic=False``, for these shapes only), the sources of its graph inputs in dynamo's order
    (that of the wrapper's ``call(args)``), and per kernel the launch configuration inductor's
    autotuning chose for ``inputs`` (:func:`_chosen`).  Float attributes (``eps``) are constants
    in the graph, not inputs.  With a timing gate (a seed derived while a search times
    candidates), inductor's compile is host work that another evaluation's timing need not stop
    (:func:`evaluator.gate.host_section`).

    Dynamo may compile more than once (a recompilation, a graph break): a second call
    shows which graphs really run, and exactly one must.
    """
    import torch
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    graphs: list[dict] = []
    modules: list = []
    decompositions = _decompositions()
    load = PyCodeCache.load_by_key_path

    def loading(*args, **kwargs):
        module = load(*args, **kwargs)
        modules.append(module)
        return module

    def saving(code: str) -> None:
        # Max-autotune compiles subgraph choices (decompose-K, a contiguous copy before a GEMM)
        # into modules of their own to benchmark them: their code is not the graph's.
        if not _benchmark_graph():
            codes.append(code)

    def backend(gm, example_inputs):
        first = len(codes)
        # Max-autotune benchmarks its GEMM templates on the GPU while it compiles, and keeps the
        # fastest: beside another evaluation's timing, or another task's benchmarks, the winner is
        # noise (a 16384x4096x4096 GEMM once kept a 32x32 tile, 7.5x torch.compile's time).  Such a
        # compile holds the GPU alone, as a timing does; any other compile is host work.
        benchmarks = any(_benchmarked(node) for node in gm.graph.nodes)
        section = gpu_alone(gate_fds) if benchmarks else host_section(
            gate_fds, torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None))
        with section:
            compiled = compile_fx(gm, example_inputs, decompositions=decompositions)
        graph = {"inputs": [_source_name(n) for n in gm.graph.nodes if n.op == "placeholder"],
                 "codes": codes[first:], "calls": 0}
        graphs.append(graph)

        def counted(*args):
            graph["calls"] += 1
            return compiled(*args)
        return counted

    torch._dynamo.reset()
    try:
        import torch.fx.experimental._config as fx_config

        # Without duck sizing, two dimensions of equal size still get separate symbols:
        # a kernel must not assume rows == cols because the example happened to.
        fx_config.use_duck_shape = False
    except (ImportError, AttributeError):
        pass
    compiled = torch.compile(reference, backend=backend, dynamic=dynamic)
    with _lowering_switches(), mock.patch.object(GraphLowering, "save_output_code", staticmethod(saving)), \
            mock.patch.object(PyCodeCache, "load_by_key_path", staticmethod(loading)), \
            torch._dynamo.config.patch(specialize_float=True):
        compiled(*inputs)
        for graph in graphs:
            graph["calls"] = 0
        compiled(*inputs)
    used = [g for g in graphs if g["calls"]]
    if len(used) != 1:
        raise NoSeed(f"torch.compile runs the reference as {len(used)} graphs "
                     f"({len(graphs)} compiled): a seed needs exactly one")
    if len(used[0]["codes"]) != 1:
        raise NoSeed(f"inductor wrote {len(used[0]['codes'])} output modules for the reference's one graph: "
                     "a seed needs exactly one")
    code = used[0]["codes"][0]
    return code, used[0]["inputs"], _configs(modules, code)

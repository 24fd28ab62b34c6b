"""Capturing inductor's output for a reference, compiled so that as much as possible is Triton.

Runs in the sandbox on a GPU (the reference is the user's code).  The reference is compiled
with dynamic shapes, and inductor is steered away from what a seed cannot use:

- matrix products become inductor's Triton GEMM templates (max-autotune over Triton
  configurations only) rather than cuBLAS calls;
- convolutions stay ``extern_kernels.convolution`` calls (no autotuning between cuDNN and
  inductor's conv templates, which cover only some variants): the converter replaces every
  one with the Triton convolution of ``evaluator.conv_kernel``; tensors keep their NCHW
  layout (no layout optimisation), which that replacement writes;
- max pooling over windows larger than inductor's limit (25 elements: a 3x3x3 pool) is
  still lowered to Triton instead of falling back to aten;
- attention runs as its math (matrix products and a softmax), never as a fused
  flash/efficient-attention library kernel, and inductor's pattern matcher does not fold
  that math back into one.

Every switch is applied only where this torch version has it.
"""
from __future__ import annotations

import contextlib
from unittest import mock

from evaluator.compile_seed import NoSeed

_INDUCTOR_CONFIG = {
    "max_autotune_gemm": True, "max_autotune_gemm_backends": "TRITON", "autotune_fallback_to_aten": False,
    "max_autotune_conv_backends": "ATEN", "layout_optimization": False, "force_layout_optimization": False,
}


def _source_name(node) -> str:
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is None:
        raise NoSeed(f"dynamo recorded no source for the graph input {node.name}")
    name = source.name
    return name() if callable(name) else name


@contextlib.contextmanager
def _lowering_switches():
    """Inductor patched for the capture: large max-pool windows and attention stay Triton."""
    import torch
    import torch._inductor.config as inductor_config
    import torch._inductor.lowering as lowering

    with contextlib.ExitStack() as stack:
        stack.enter_context(inductor_config.patch(
            {k: v for k, v in _INDUCTOR_CONFIG.items() if hasattr(inductor_config, k)}))
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
        stack.enter_context(torch.no_grad())
        yield


def capture(reference, inputs: list) -> tuple[str, list[str]]:
    """Inductor's output module for ``reference(*inputs)`` compiled with dynamic shapes, and the
    sources of its graph inputs in dynamo's order (that of the wrapper's ``call(args)``).

    Dynamo may compile more than once (a recompilation, a graph break): a second call
    shows which graphs really run, and exactly one must.
    """
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

    torch._dynamo.reset()
    try:
        import torch.fx.experimental._config as fx_config

        # Without duck sizing, two dimensions of equal size still get separate symbols:
        # a kernel must not assume rows == cols because the example happened to.
        fx_config.use_duck_shape = False
    except (ImportError, AttributeError):
        pass
    compiled = torch.compile(reference, backend=backend, dynamic=True)
    with _lowering_switches(), mock.patch.object(GraphLowering, "save_output_code", staticmethod(codes.append)):
        compiled(*inputs)
        for graph in graphs:
            graph["calls"] = 0
        compiled(*inputs)
    used = [g for g in graphs if g["calls"]]
    if len(used) != 1 or len(used[0]["codes"]) != 1:
        raise NoSeed(f"torch.compile runs the reference as {len(used)} graphs "
                     f"({len(graphs)} compiled): a seed needs exactly one")
    return used[0]["codes"][0], used[0]["inputs"]

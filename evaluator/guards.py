"""Run-time anti-cheat guards, used inside the sandbox around a candidate's calls.

- :func:`install_launch_counter` counts Triton kernel launches (compiled or
  interpreted), so a candidate that computes with PyTorch alone is rejected.
- :class:`CandidateMonitor` records the aten operators a call dispatches, so
  a candidate that hands the heavy work back to PyTorch (a matmul, a softmax,
  ...) is rejected; and it poisons every uninitialised allocation (NaN, or a
  sentinel for integers), so an output element the candidate never writes
  cannot pass by holding stale correct values.
- :func:`timer_identities` / :func:`timers_tampered` notice a candidate that
  replaced the functions the timing relies on.
"""
from __future__ import annotations

import threading
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten operators that do an operator's real work: a candidate may allocate, view,
# copy and do light glue in PyTorch, but not these.
HEAVY_OPS = frozenset({
    "mm", "bmm", "addmm", "addmv", "mv", "matmul", "baddbmm", "addbmm", "dot", "vdot", "_scaled_mm",
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution",
    "_softmax", "softmax", "_log_softmax", "log_softmax", "native_layer_norm", "layer_norm",
    "_fused_rms_norm", "rms_norm", "native_group_norm", "native_batch_norm", "_native_batch_norm_legit",
    "gelu", "nll_loss_forward", "nll_loss2d_forward", "cross_entropy_loss",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "scaled_dot_product_attention", "_flash_attention_forward",
    "linear", "einsum", "tensordot", "cumsum", "sort", "topk",
})


_launches = 0
_originals: dict[type, object] = {}
_compiled: dict[str, dict] = {}


def _record(kernel) -> None:
    """Compiled facts of a launched kernel (GPU only: the interpreter compiles nothing)."""
    metadata = getattr(kernel, "metadata", None)
    if metadata is None:
        return
    name = getattr(metadata, "name", None) or getattr(kernel, "name", "kernel")
    _compiled[name] = {
        "name": name, "registers": getattr(kernel, "n_regs", None), "spills": getattr(kernel, "n_spills", None),
        "shared_bytes": getattr(metadata, "shared", None), "num_warps": getattr(metadata, "num_warps", None),
        "num_stages": getattr(metadata, "num_stages", None),
    }


def install_launch_counter() -> None:
    """Count every ``run`` of Triton's JIT and interpreted kernels and note what each compiled to
    (idempotent, process-wide; :func:`uninstall_launch_counter` before timing)."""
    from triton.runtime.jit import JITFunction

    classes = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    except ImportError:  # older Triton without the interpreter class
        pass
    for cls in classes:
        if cls in _originals:
            continue
        original = _originals[cls] = cls.run

        def counted(kernel, *args, _original=original, **kwargs):
            global _launches
            _launches += 1
            compiled = _original(kernel, *args, **kwargs)
            _record(compiled)
            return compiled

        cls.run = counted


def uninstall_launch_counter() -> None:
    """Restore Triton's own ``run``: the timed calls carry no wrapper of ours."""
    while _originals:
        cls, original = _originals.popitem()
        cls.run = original


def launch_count() -> int:
    return _launches


def compiled_kernels() -> list[dict]:
    return list(_compiled.values())


_EMPTY_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
_INT_SENTINEL = -1_234_567


class CandidateMonitor(TorchDispatchMode):
    """While active: records aten operator names and poisons uninitialised allocations."""

    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        self.ops.add(name)
        out = func(*args, **(kwargs or {}))
        if name in _EMPTY_OPS and isinstance(out, torch.Tensor) and out.numel():
            if out.is_floating_point() or out.is_complex():
                out.fill_(float("nan"))
            elif out.dtype != torch.bool:
                out.fill_(max(_INT_SENTINEL, torch.iinfo(out.dtype).min))
        return out

    @property
    def heavy(self) -> list[str]:
        return sorted(self.ops & HEAVY_OPS)


def timer_identities() -> dict[str, object]:
    ids = {"time.perf_counter": time.perf_counter, "torch.cuda.synchronize": torch.cuda.synchronize,
           "torch.cuda.Event": torch.cuda.Event, "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
           "torch.cuda.Event.record": torch.cuda.Event.record}
    return ids


def timers_tampered(before: dict[str, object]) -> list[str]:
    now = timer_identities()
    return [name for name, fn in before.items() if now[name] is not fn]


def extra_threads(before: set[int]) -> list[str]:
    return [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]


def warm_up() -> None:
    """Pay the one-time costs of the guards (lazy imports of the dispatch machinery, ~2 s)
    in the worker, before it forks, instead of in every candidate's child."""
    install_launch_counter()
    with CandidateMonitor():
        torch.empty(4).add_(1)

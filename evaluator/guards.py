"""Run-time anti-cheat guards, used inside the sandbox around a candidate's calls.

- :func:`install_launch_counter` counts Triton kernel launches (compiled or
  interpreted) that completed, so a candidate that computes with PyTorch alone,
  or falls back to it when its launch fails, is rejected.
- :class:`CandidateMonitor` records the aten operators a call dispatches, so
  a candidate that hands work back to PyTorch (anything but the glue of
  :data:`GLUE_OPS`: a matmul, a softmax, a sum, ...) is rejected; and it poisons every uninitialised allocation (NaN, or a
  sentinel for integers), so an output element the candidate never writes
  cannot pass by holding stale correct values.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten operators a candidate may dispatch: glue around its own kernels (allocation, views and
# reshapes, copies, dtype casts, fills, reading sizes and scalars).  Anything else (a matmul, a sum,
# a reduction no list of "heavy" operators thought of) is work that must run in its Triton kernels.
GLUE_OPS = frozenset({
    # allocation
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "scalar_tensor",
    "arange", "lift_fresh", "lift_fresh_copy", "resize_",
    # views and reshapes
    "view", "_unsafe_view", "reshape", "_reshape_alias", "view_as", "alias", "detach", "permute",
    "transpose", "transpose_", "t", "t_", "expand", "expand_as", "as_strided", "as_strided_", "squeeze",
    "squeeze_", "unsqueeze", "unsqueeze_", "flatten", "unflatten", "narrow", "slice", "select", "split",
    "split_with_sizes", "chunk", "unbind", "movedim", "diagonal", "view_as_real", "view_as_complex",
    "unfold", "_reshape_copy",
    # copies, dtype casts, fills
    "contiguous", "clone", "copy_", "_to_copy", "to", "type_as", "_copy_from", "_copy_from_and_resize",
    "fill_", "fill", "zero_",
    # sizes and scalars
    "size", "stride", "numel", "dim", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_contiguous", "is_same_size", "_local_scalar_dense", "item",
})


_launches = 0  # launches that returned: the kernel was compiled and queued (or interpreted)
_attempts = 0  # launches tried, failed ones included
_inside_launch = 0  # depth of interpreted launches under way: what the interpreter dispatches is not the candidate's
_originals: dict[type, object] = {}
_compiled: dict[str, dict] = {}
_engine_kernels: set[int] = set()  # the engine's own kernels (evaluator.compare_kernels): not the candidate's
_argument_bytes: dict[str, float] | None = None  # while recording (the profiled audit): kernel name -> bytes


def engine_kernel(kernel):
    """Mark a Triton kernel of the engine's: its launches are neither counted nor recorded."""
    _engine_kernels.add(id(kernel))
    return kernel


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
    (idempotent, process-wide: every call of a candidate, checked or timed, counts its launches)."""
    from triton.runtime.jit import JITFunction

    classes = [(JITFunction, 0)]
    try:
        from triton.runtime.interpreter import InterpretedFunction
        # The interpreter runs a kernel with PyTorch's copies: those are Triton's, not the candidate's.
        # (Only there: on a GPU, ops dispatched inside a launch, from a launch hook say, are the candidate's.)
        classes.append((InterpretedFunction, 1))
    except ImportError:  # older Triton without the interpreter class
        pass
    for cls, interpreted in classes:
        if cls in _originals:
            continue
        original = _originals[cls] = cls.run

        def counted(kernel, *args, _original=original, _depth=interpreted, **kwargs):
            # Counted once it returns: a launch that fails to compile or to run (and a candidate that
            # catches the failure and computes with PyTorch instead) launched nothing.
            global _launches, _attempts, _inside_launch
            if id(kernel) in _engine_kernels:
                return _original(kernel, *args, **kwargs)
            _attempts += 1
            _inside_launch += _depth
            try:
                compiled = _original(kernel, *args, **kwargs)
            finally:
                _inside_launch -= _depth
            _launches += 1
            _record(compiled)
            if _argument_bytes is not None:
                _add_argument_bytes(compiled, (*args, *kwargs.values()))
            return compiled

        cls.run = counted


def _add_argument_bytes(compiled, args) -> None:
    """The bytes of the tensors a launch was passed, each storage once (a kernel's work, as far as the
    host can see it), added to its kernel's."""
    name = getattr(getattr(compiled, "metadata", None), "name", None)
    if name is None:
        return
    storages = {}
    for value in args:
        if isinstance(value, torch.Tensor):
            size = min(value.numel() * value.element_size(), value.untyped_storage().nbytes())
            key = value.untyped_storage().data_ptr()
            storages[key] = max(storages.get(key, 0), size)
    _argument_bytes[name] = _argument_bytes.get(name, 0.0) + sum(storages.values())


@contextmanager
def argument_bytes():
    """While open, the tensor bytes each compiled kernel's launches were passed: ``{name: bytes}``
    (for the profiled audit only: timed calls do not pay for it)."""
    global _argument_bytes
    recorded = _argument_bytes = {}
    try:
        yield recorded
    finally:
        _argument_bytes = None


def launch_count() -> int:
    """Completed launches so far."""
    return _launches


def attempted_launches() -> int:
    """Launches tried so far, failed ones included."""
    return _attempts


def compiled_kernels() -> list[dict]:
    return list(_compiled.values())


_EMPTY_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
_INT_SENTINEL = -1_234_567


class CandidateMonitor(TorchDispatchMode):
    """While active: records aten operator names and poisons uninitialised allocations."""

    def __init__(self, poison: bool = True):
        """``poison=False`` leaves allocations as they are: no device work of ours inside a timed call."""
        super().__init__()
        self.ops: set[str] = set()
        self.poison = poison

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _inside_launch:  # the interpreter's own copies
            return func(*args, **(kwargs or {}))
        name = func._schema.name.split("::")[-1]
        self.ops.add(name)
        out = func(*args, **(kwargs or {}))
        if self.poison and name in _EMPTY_OPS and isinstance(out, torch.Tensor) and out.numel():
            if out.is_floating_point() or out.is_complex():
                out.fill_(float("nan"))
            elif out.dtype != torch.bool:
                out.fill_(max(_INT_SENTINEL, torch.iinfo(out.dtype).min))
        return out

    @property
    def not_glue(self) -> list[str]:
        """Operators dispatched that are not glue (:data:`GLUE_OPS`)."""
        return sorted(self.ops - GLUE_OPS)


def call_violation(monitor: CandidateMonitor, completed: int, attempted: int) -> str | None:
    """Why a monitored call breaks the rules (``completed`` and ``attempted`` launches during it), or None."""
    if not completed:
        if attempted:
            return (f"the candidate's Triton launches all failed ({attempted} tried, none completed): the "
                    "computation must run in its own Triton kernels, not in a fallback")
        return "the candidate launched no Triton kernel: the computation must run in its own Triton kernels"
    if monitor.not_glue:
        return (f"the candidate calls PyTorch's {', '.join(monitor.not_glue)}: PyTorch may only allocate, "
                "view, copy and cast around the candidate's own Triton kernels")
    return None


def extra_threads(before: set[int]) -> list[str]:
    return [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]


def warm_up() -> None:
    """Pay the one-time costs of the guards (lazy imports of the dispatch machinery, ~2 s)
    in the worker, before it forks, instead of in every candidate's child."""
    install_launch_counter()
    with CandidateMonitor():
        torch.empty(4).add_(1)

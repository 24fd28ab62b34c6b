"""The hardware roofline: measured peaks, the work of one call, and the fraction reached.

Peaks are measured once per GPU, alone on it, by the evaluator's own
``roofline_peaks`` request (a large device-to-device copy for memory
bandwidth, a large fp16 matmul for arithmetic; no candidate code in that
process, and in no evaluation's memory peak), and sent with each evaluation.  They can also be
given in the evaluator's settings (``roofline_peaks``), e.g. from a datasheet.
The work of one call comes from the task (``flops(*inputs)``,
``bytes_moved(*inputs)``); without ``bytes_moved`` the bytes of the inputs
and outputs are used, a lower bound on the traffic of any correct kernel;
without ``flops``, the FLOPs of the reference's matrix products and
convolutions as PyTorch's ``FlopCounterMode`` counts them.

Two floors: the memory floor (bytes over the bandwidth) and the compute floor
(FLOPs over the peak for the outputs' dtype: the fp16 tensor-core peak for fp16
and bf16, the TF32 one for fp32, the fastest any fp32 kernel can go).  The
roofline fraction is the larger floor over the kernel's time, and the bound
says which floor it is.  Counted FLOPs are not declared ones: a kernel may
legitimately skip products the reference makes (a sum of a GEMM's outputs is a
GEMV), so only a task's own declarations can reject a kernel as faster than
the hardware (``evaluator.roofline_limit``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from evaluator.compare import flatten

COPY_BYTES = 1 << 30  # per buffer: far beyond any L2
MATMUL_N = 8192


@dataclass(frozen=True)
class Peaks:
    bytes_per_s: float
    flops_per_s: float  # fp16 matmul on the tensor cores
    source: str  # "measured on <device>" or "configured"
    tf32_flops_per_s: float | None = None  # fp32 matmul in TF32; None: half the fp16 peak (as on Hopper)

    def flops_for(self, dtype: torch.dtype | None) -> float:
        """The peak FLOP rate a kernel whose outputs are ``dtype`` could reach at best."""
        if dtype in (torch.float16, torch.bfloat16, torch.int8, None):
            return self.flops_per_s
        return self.tf32_flops_per_s or self.flops_per_s / 2


@dataclass(frozen=True)
class Work:
    bytes: float
    flops: float
    declared: bool  # False when the bytes were derived from the inputs and outputs
    flops_declared: bool = True  # False when the FLOPs were counted (FlopCounterMode)
    dtype: torch.dtype | None = None  # of the reference's first floating output: which compute peak


def _best_ms(fn, reps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = math.inf
    fn()
    for _ in range(reps):
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def _copy_ms(device: str) -> float:
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return _best_ms(lambda: dst.copy_(src), 10)


def _matmul_ms(device: str) -> float:
    a = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.float16, device=device)
    b = torch.randn_like(a)
    return _best_ms(lambda: a @ b, 10)


def _tf32_matmul_ms(device: str) -> float:
    a = torch.randn(MATMUL_N, MATMUL_N, dtype=torch.float32, device=device)
    b = torch.randn_like(a)
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return _best_ms(lambda: a @ b, 10)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed


def measure_peaks(device: str) -> Peaks:
    """Peak memory bandwidth, fp16 and TF32 matmul throughput of this GPU, as reached by PyTorch."""
    copy_ms, mm_ms, tf32_ms = _copy_ms(device), _matmul_ms(device), _tf32_matmul_ms(device)
    torch.cuda.empty_cache()
    return Peaks(bytes_per_s=2 * COPY_BYTES / (copy_ms * 1e-3), flops_per_s=2 * MATMUL_N ** 3 / (mm_ms * 1e-3),
                 source=f"measured on {torch.cuda.get_device_name()}",
                 tf32_flops_per_s=2 * MATMUL_N ** 3 / (tf32_ms * 1e-3))


def peaks_for(given: dict | None) -> Peaks | None:
    """The peaks the evaluator sends (configured, or measured once per device by a ``roofline_peaks``
    request of its own: never in a candidate's process, nor cached where a candidate could write);
    None without them (the evaluator measures none on the CPU: the interpreter's speed says nothing
    about a roofline)."""
    if not given:
        return None
    tf32 = given.get("tf32_flops_per_s")
    return Peaks(float(given["bytes_per_s"]), float(given["flops_per_s"]), given.get("source", "configured"),
                 float(tf32) if tf32 else None)


def _tensor_bytes(values) -> int:
    """Bytes a kernel must read or write at least: each storage once (an expanded input, its elements
    all one, holds less than its shape says; two inputs that share memory are one read)."""
    storages: dict[int, int] = {}
    for v in flatten(values):
        if isinstance(v, torch.Tensor):
            key = v.untyped_storage().data_ptr()
            size = min(v.numel() * v.element_size(), v.untyped_storage().nbytes())
            storages[key] = max(storages.get(key, 0), size)
    return sum(storages.values())


def _dtype(outputs) -> torch.dtype | None:
    return next((t.dtype for t in flatten(outputs) if isinstance(t, torch.Tensor) and t.is_floating_point()), None)


def work_of(problem, inputs: list, outputs) -> Work:
    """``outputs()`` calls the reference once: its outputs' bytes and dtype, and its FLOPs counted where
    the task declares none."""
    from torch.utils.flop_counter import FlopCounterMode

    flops_fn, bytes_fn = getattr(problem, "flops", None), getattr(problem, "bytes_moved", None)
    counter = None if callable(flops_fn) else FlopCounterMode(display=False)
    if counter is None:
        out = outputs()
        flops = float(flops_fn(*inputs))
    else:
        with counter:
            out = outputs()
        flops = float(counter.get_total_flops())
    if callable(bytes_fn):
        traffic, declared = float(bytes_fn(*inputs)), True
    else:
        traffic, declared = float(_tensor_bytes(inputs) + _tensor_bytes(out)), False
    return Work(bytes=traffic, flops=flops, declared=declared, flops_declared=counter is None, dtype=_dtype(out))


def floors(work: Work, peaks: Peaks) -> dict:
    """``{"memory_ms", "compute_ms", "floor_ms", "bound"}``: the time no kernel can beat, and whether
    memory or compute sets it."""
    memory_ms = work.bytes / peaks.bytes_per_s * 1e3
    compute_ms = work.flops / peaks.flops_for(work.dtype) * 1e3
    return {"memory_ms": memory_ms, "compute_ms": compute_ms, "floor_ms": max(memory_ms, compute_ms),
            "bound": "compute" if compute_ms > memory_ms else "memory"}


def fraction(work: Work, runtime_ms: float, peaks: Peaks, declared_only: bool = False) -> float:
    """The larger floor over the kernel's time (see the module's text); ``declared_only``: counted FLOPs
    left out, for the rejection of results faster than the hardware."""
    if runtime_ms <= 0:
        return math.inf
    if declared_only and not work.flops_declared:
        work = dataclasses.replace(work, flops=0.0)
    return floors(work, peaks)["floor_ms"] / runtime_ms

"""The hardware roofline: measured peaks, the work of one call, and the fraction reached.

Peaks are measured once per GPU, alone on it, by the evaluator's own
``roofline_peaks`` request (a large device-to-device copy for memory
bandwidth, a large fp16 matmul for arithmetic; no candidate code in that
process, and in no evaluation's memory peak), and sent with each evaluation.  They can also be
given in the evaluator's settings (``roofline_peaks``), e.g. from a datasheet.
The work of one call comes from the task (``flops(*inputs)``,
``bytes_moved(*inputs)``); without ``bytes_moved`` the bytes of the inputs
and outputs are used, a lower bound on the traffic of any correct kernel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from evaluator.compare import flatten

COPY_BYTES = 1 << 30  # per buffer: far beyond any L2
MATMUL_N = 8192


@dataclass(frozen=True)
class Peaks:
    bytes_per_s: float
    flops_per_s: float
    source: str  # "measured on <device>" or "configured"


@dataclass(frozen=True)
class Work:
    bytes: float
    flops: float
    declared: bool  # False when the bytes were derived from the inputs and outputs


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


def measure_peaks(device: str) -> Peaks:
    """Peak memory bandwidth and fp16 matmul throughput of this GPU, as reached by PyTorch."""
    copy_ms, mm_ms = _copy_ms(device), _matmul_ms(device)
    torch.cuda.empty_cache()
    return Peaks(bytes_per_s=2 * COPY_BYTES / (copy_ms * 1e-3), flops_per_s=2 * MATMUL_N ** 3 / (mm_ms * 1e-3),
                 source=f"measured on {torch.cuda.get_device_name()}")


def peaks_for(given: dict | None) -> Peaks | None:
    """The peaks the evaluator sends (configured, or measured once per device by a ``roofline_peaks``
    request of its own: never in a candidate's process, nor cached where a candidate could write);
    None without them (the evaluator measures none on the CPU: the interpreter's speed says nothing
    about a roofline)."""
    if not given:
        return None
    return Peaks(float(given["bytes_per_s"]), float(given["flops_per_s"]), given.get("source", "configured"))


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


def work_of(problem, inputs: list, outputs) -> Work:
    """``outputs()`` gives the reference's outputs; it is called only when the task declares no bytes."""
    flops_fn, bytes_fn = getattr(problem, "flops", None), getattr(problem, "bytes_moved", None)
    flops = float(flops_fn(*inputs)) if callable(flops_fn) else 0.0
    if callable(bytes_fn):
        return Work(bytes=float(bytes_fn(*inputs)), flops=flops, declared=True)
    return Work(bytes=float(_tensor_bytes(inputs) + _tensor_bytes(outputs())), flops=flops, declared=False)


def fraction(work: Work, runtime_ms: float, peaks: Peaks) -> float:
    """The larger of achieved bandwidth over peak and achieved FLOP/s over peak."""
    seconds = runtime_ms * 1e-3
    if seconds <= 0:
        return math.inf
    return max(work.bytes / seconds / peaks.bytes_per_s, work.flops / seconds / peaks.flops_per_s)

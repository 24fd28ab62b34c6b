"""Comparison of a candidate's outputs with the reference's (runs in the sandbox).

Outputs of real problems reach gigabytes (KernelBench's level 1 has 7.5 GB
inputs), so nothing here makes a whole-tensor copy in float64: values are
compared, and tensors digested, a chunk of ``CHUNK`` elements at a time.
"""
from __future__ import annotations

import os

import torch

# Defaults when a task sets no ATOL/RTOL: tight for fp32, looser for half types.
DEFAULT_TOLERANCE = {
    torch.float32: (1e-4, 1e-4),
    torch.float64: (1e-6, 1e-6),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}
CHUNK = 1 << 22  # elements at a time: float64 temporaries of 32 MB each
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def flatten(outputs) -> list:
    if isinstance(outputs, (tuple, list)):
        return [t for o in outputs for t in flatten(o)]
    return [outputs]


def nbytes(values) -> int:
    """The bytes of the tensors in ``values`` (nested lists and tuples included)."""
    return sum(t.numel() * t.element_size() for t in flatten(values) if isinstance(t, torch.Tensor))


# What an output may be: a subclass of either (of Parameter too) could compute its values only when
# they are read, by the comparison, outside any timed window
PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def mismatch(expected, actual, atol: float | None, rtol: float | None, atol_scale: float = 1.0) -> str | None:
    """Why ``actual`` does not match ``expected``, or None when it does.  ``atol_scale`` multiplies the
    absolute tolerance (inputs scaled up by that factor: see ``evaluator.correctness``)."""
    exp, act = flatten(expected), flatten(actual)
    if len(exp) != len(act):
        return f"returned {len(act)} outputs, the reference returns {len(exp)}"
    for i, (e, a) in enumerate(zip(exp, act)):
        where = f"output {i}: " if len(exp) > 1 else ""
        if not isinstance(e, torch.Tensor):
            if e != a:
                return f"{where}returned {a!r}, the reference returns {e!r}"
            continue
        if not isinstance(a, torch.Tensor):
            return f"{where}returned {type(a).__name__}, the reference returns a tensor"
        if type(a) not in PLAIN_TENSORS:
            return f"{where}returned a tensor subclass {type(a).__name__}"
        if a.shape != e.shape:
            return f"{where}shape {tuple(a.shape)}, expected {tuple(e.shape)}"
        if a.dtype != e.dtype:
            return f"{where}dtype {a.dtype}, expected {e.dtype}"
        if a.device != e.device:
            return f"{where}on {a.device}, expected {e.device}"
        problem = _value_mismatch(e, a, atol, rtol, atol_scale)
        if problem:
            return where + problem
    return None


def _flat(t: torch.Tensor) -> torch.Tensor:
    """The elements in logical order as a 1-d view (a copy only for a non-contiguous tensor)."""
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def chunks(*tensors: torch.Tensor):
    flats = [_flat(t) for t in tensors]
    n = flats[0].numel()
    for start in range(0, n, CHUNK):
        yield start, [f[start:start + CHUNK] for f in flats]


def finite_abs_max(outputs) -> float:
    """The largest finite magnitude among the floating tensors of ``outputs`` (0.0 where none)."""
    largest = 0.0
    for t in flatten(outputs):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            for _, (chunk,) in chunks(t):
                largest = max(largest, float(torch.where(torch.isfinite(chunk), chunk.abs(), 0).max()))
    return largest


def _value_mismatch(e: torch.Tensor, a: torch.Tensor, atol, rtol, atol_scale: float = 1.0) -> str | None:
    if not e.is_floating_point():
        differ = sum(int((ec != ac).sum()) for _, (ec, ac) in chunks(e, a))
        return f"{differ} of {e.numel()} integer elements differ" if differ else None
    table, atol, rtol = _table(e, a, atol, rtol, atol_scale)
    return None if table is None else _verdict(table, e, a, atol, rtol)


def beyond_tolerance(expected, actual, atol: float | None, rtol: float | None,
                     atol_scale: float = 1.0) -> tuple[int, float, float] | None:
    """How far ``actual`` is from ``expected`` where they differ in values only: the floating elements
    beyond the tolerance, over all outputs, the largest excess over it (negative where none is) and
    the largest distance; None where anything else differs (structure, shape, dtype, integers, NaN
    or Inf placement)."""
    if mismatch(expected, actual, float("inf"), 0.0) is not None:  # all but the finite values' distance
        return None
    count, worst, largest = 0, float("-inf"), 0.0
    for e, a in zip(flatten(expected), flatten(actual)):
        if isinstance(e, torch.Tensor) and e.is_floating_point() and e.numel():
            table, _, _ = _table(e, a, atol, rtol, atol_scale)
            count += int(table[:, 3].sum())
            worst = max(worst, float(table[:, 5].max()))
            largest = max(largest, float(table[:, 4].max()))
    return count, worst, largest


def tolerance_of(dtype: torch.dtype, atol: float | None, rtol: float | None, atol_scale: float = 1.0):
    """(atol, rtol) a comparison of ``dtype`` uses: the task's, else the dtype's defaults."""
    d_atol, d_rtol = DEFAULT_TOLERANCE.get(dtype, (1e-4, 1e-4))
    return (d_atol if atol is None else atol) * atol_scale, d_rtol if rtol is None else rtol


def _table(e: torch.Tensor, a: torch.Tensor, atol, rtol, atol_scale: float):
    """The rows of partial results ``_verdict`` reads (None for no element), and the tolerance used."""
    atol, rtol = tolerance_of(e.dtype, atol, rtol, atol_scale)
    if e.is_cuda and e.numel():  # one pass over both tensors (evaluator.compare_kernels)
        from evaluator.compare_kernels import mismatch_table

        return mismatch_table(_flat(e), _flat(a), atol, rtol).cpu(), atol, rtol
    # Per chunk, device scalars only: one synchronisation at the end, not several per chunk.
    rows = []  # [NaN differs, Inf differs, non-finite, bad count, max error, worst excess, its index]
    for start, (ec, ac) in chunks(e, a):
        ef, af = ec.double(), ac.double()
        e_nan, a_nan = torch.isnan(ef), torch.isnan(af)
        finite = torch.isfinite(ef)
        inf = ~finite & ~e_nan
        err = torch.where(finite, (af - ef).abs(), torch.zeros_like(ef)).nan_to_num(nan=0.0, posinf=0.0)
        excess = torch.where(finite, err - (atol + rtol * ef.abs()), torch.full_like(ef, -1.0))
        worst, idx = excess.max(0)
        rows.append(torch.stack([
            (e_nan != a_nan).any().double(),  # NaN and Inf pass only where the reference has the same value
            (inf & (af != ef)).any().double(),
            (finite & ~torch.isfinite(af)).any().double(),
            (excess > 0).sum().double(), err.max(), worst, (idx + start).double()]))
    return (torch.stack(rows).cpu() if rows else None), atol, rtol


def _verdict(table: torch.Tensor, e: torch.Tensor, a: torch.Tensor, atol: float, rtol: float) -> str | None:
    """What the rows of partial results (see ``_value_mismatch``) say, with the worst element."""
    if table[:, 0].any():
        return "NaN where the reference has none (or the reverse)"
    if table[:, 1].any():
        return "Inf where the reference differs"
    if table[:, 2].any():
        return "non-finite values where the reference is finite"
    bad = int(table[:, 3].sum())
    if bad:
        row = table[int(table[:, 5].argmax())]
        idx = int(row[6])
        at = tuple(int(i) for i in torch.unravel_index(torch.tensor(idx), e.shape))
        got, want = float(a[at]), float(e[at])
        return (f"{bad} of {e.numel()} elements beyond atol={atol:g}, rtol={rtol:g}; "
                f"max abs error {float(table[:, 4].max()):.3g} (at flat index {idx}: got {got:.6g}, "
                f"expected {want:.6g})")
    return None


def digest(value, *, canonical: bool = False) -> tuple:
    """A fingerprint of ``value`` (tensors, nested lists, plain values) that changes when any bit of a
    tensor does: a weighted sum of its raw words modulo 2**64, a chunk at a time, the weights drawn per
    call of the process.  ``canonical``: -0.0 counts as 0.0 and every NaN as one NaN (equal values,
    not equal bits), as for "two calls gave the same output".
    """
    parts = []
    for t in flatten(value):
        if not isinstance(t, torch.Tensor):
            parts.append(("value", repr(t)))
            continue
        parts.append((tuple(t.shape), str(t.dtype), str(t.device), _tensor_digest(t, canonical)))
    return tuple(parts)


_WEIGHTS: dict[str, torch.Tensor] = {}


def _weights(device: torch.device) -> torch.Tensor:
    key = str(device)
    if key not in _WEIGHTS:  # odd weights, fresh for this process: a candidate cannot aim at a collision
        seed = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
        generator = torch.Generator().manual_seed(seed)
        w = torch.randint(-(1 << 62), 1 << 62, (CHUNK,), dtype=torch.int64, generator=generator) | 1
        _WEIGHTS[key] = w.to(device)
    return _WEIGHTS[key]


def _tensor_digest(t: torch.Tensor, canonical: bool) -> int:
    if t.numel() == 0:
        return 0
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_cuda:  # one pass (evaluator.compare_kernels)
        from evaluator.compare_kernels import digest_of

        return digest_of(_flat(t), canonical)
    weights = _weights(t.device)
    total = 0
    for _, (chunk,) in chunks(t):
        if canonical and chunk.is_floating_point():
            chunk = torch.where(torch.isnan(chunk), torch.full_like(chunk, float("nan")), chunk + 0.0)
        words = chunk.view(_INT_OF_SIZE[chunk.element_size()]).to(torch.int64)
        s = int((words * weights[:words.numel()]).sum())  # int64 arithmetic wraps modulo 2**64
        total = (total * 0x9E3779B97F4A7C15 + s) & ((1 << 64) - 1)
    return total

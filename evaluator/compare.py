"""Comparison of a candidate's outputs with the reference's (runs in the sandbox)."""
from __future__ import annotations

import torch

# Defaults when a task sets no ATOL/RTOL: tight for fp32, looser for half types.
DEFAULT_TOLERANCE = {
    torch.float32: (1e-4, 1e-4),
    torch.float64: (1e-6, 1e-6),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


def flatten(outputs) -> list:
    if isinstance(outputs, (tuple, list)):
        return [t for o in outputs for t in flatten(o)]
    return [outputs]


def mismatch(expected, actual, atol: float | None, rtol: float | None) -> str | None:
    """Why ``actual`` does not match ``expected``, or None when it does."""
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
        if type(a) is not torch.Tensor and not isinstance(a, torch.nn.Parameter):
            return f"{where}returned a tensor subclass {type(a).__name__}"
        if a.shape != e.shape:
            return f"{where}shape {tuple(a.shape)}, expected {tuple(e.shape)}"
        if a.dtype != e.dtype:
            return f"{where}dtype {a.dtype}, expected {e.dtype}"
        if a.device != e.device:
            return f"{where}on {a.device}, expected {e.device}"
        problem = _value_mismatch(e, a, atol, rtol)
        if problem:
            return where + problem
    return None


def _value_mismatch(e: torch.Tensor, a: torch.Tensor, atol, rtol) -> str | None:
    if not e.is_floating_point():
        bad = (e != a)
        if bad.any():
            return f"{int(bad.sum())} of {e.numel()} integer elements differ"
        return None
    d_atol, d_rtol = DEFAULT_TOLERANCE.get(e.dtype, (1e-4, 1e-4))
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    ef, af = e.double(), a.double()
    # NaN and Inf are accepted only where the reference has the same value.
    special = ~torch.isfinite(ef)
    if not torch.equal(torch.isnan(ef), torch.isnan(af)):
        return "NaN where the reference has none (or the reverse)"
    if (af[special & ~torch.isnan(ef)] != ef[special & ~torch.isnan(ef)]).any():
        return "Inf where the reference differs"
    finite = ~special
    if not torch.isfinite(af[finite]).all():
        return "non-finite values where the reference is finite"
    err = (af - ef).abs()
    allowed = atol + rtol * ef.abs()
    bad = (err > allowed) & finite
    if bad.any():
        idx = int(torch.argmax(torch.where(bad, err - allowed, torch.zeros_like(err))))
        return (
            f"{int(bad.sum())} of {e.numel()} elements beyond atol={atol:g}, rtol={rtol:g}; "
            f"max abs error {float(err[finite].max()):.3g} (at flat index {idx}: "
            f"got {float(af.flatten()[idx]):.6g}, expected {float(ef.flatten()[idx]):.6g})"
        )
    return None

"""What a prompt says of a program's evaluation, in words the templates print as they are.

A correct program's time beside eager PyTorch's and torch.compile's (measured side by side on the
task's largest shape set), the roofline's memory and compute floors and which one bounds it, and, where
the evaluator profiled its timed calls on a GPU (``evaluator.kernel_profile``), each of its kernels:
share of device time, launches per call, time per launch, the rate reached against the GPU's peaks,
registers, spills and occupancy.  A failed program: the stage it failed at and the first lines of its
error.  A figure the evaluation did not measure is left out, never guessed: on the CPU there is no
roofline and no device profile, and the interpreter's times are said to be the interpreter's.
"""
from __future__ import annotations

from evaluator.result import EvalResult


def _ms(value: float) -> str:
    return f"{value:.3g} ms" if value >= 1 else f"{value * 1e3:.3g} us"


def _share(value: float) -> str:
    return f"{value:.0%}" if value >= 0.1 else f"{value:.1%}"


def _rate(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def timing(result: EvalResult | None) -> str:
    """``0.412 ms; eager PyTorch 0.762 ms; torch.compile 0.530 ms``, or "" without a time."""
    if result is None or not result.correct or not result.runtime_ms:
        return ""
    parts = [_ms(result.runtime_ms)]
    if result.ref_runtime_ms:
        parts.append(f"eager PyTorch {_ms(result.ref_runtime_ms)}")
    if result.compiled_runtime_ms:
        parts.append(f"torch.compile {_ms(result.compiled_runtime_ms)}")
    text = "; ".join(parts) + " (the task's largest shape set, timed side by side)"
    if not result.timing_representative:
        text += "; Triton's interpreter on the CPU: not a GPU's times"
    return text


def floors(result: EvalResult | None) -> str:
    """``memory floor 0.12 ms, compute floor 4 us: memory-bound; 29.1% of it reached``, or ""."""
    roofline = (result.extra.get("roofline") or {}) if result is not None else {}
    if roofline.get("memory_ms") is None or roofline.get("compute_ms") is None:
        return ""
    text = (f"memory floor {_ms(roofline['memory_ms'])}, compute floor {_ms(roofline['compute_ms'])}: "
            f"{roofline['bound']}-bound")
    if result.correct and result.roofline_fraction is not None:
        text += f"; {result.roofline_fraction:.1%} of it reached"
    return text


def kernel_rows(result: EvalResult | None, shown: int | None = None) -> dict:
    """``{"calls", "rows": [line per kernel], "rest"}``: the profile's kernels, the ``shown`` largest
    by share of device time (None: all), the others summed in ``rest``; {} without a profile."""
    profile = (result.extra.get("kernel_profile") or {}) if result is not None else {}
    kernels = profile.get("kernels") or []
    if not kernels:
        return {}
    compute_bound = (result.extra.get("roofline") or {}).get("bound") == "compute"
    kept = kernels if shown is None else kernels[:shown]
    rest = []
    if len(kept) < len(kernels):
        dropped = kernels[len(kept):]
        rest.append(f"{len(dropped)} more kernel(s) of the candidate: {_share(sum(k['share'] for k in dropped))}")
    if profile.get("other_share", 0) >= 0.0005:
        names = ", ".join(f"{o['name']} {_share(o['share'])}" for o in profile.get("others", []))
        rest.append(f"other device work: {_share(profile['other_share'])}" + (f" ({names})" if names else ""))
    return {"calls": profile.get("calls", 0), "rows": [_kernel_line(k, compute_bound) for k in kept], "rest": rest}


def _kernel_line(k: dict, compute_bound: bool) -> str:
    """One kernel's share, launches, time and rate: its FLOP rate where compute bounds the call (and
    one kernel has all the work), else its bandwidth; then registers, spills, warps, occupancy."""
    launches = k["launches_per_call"]
    parts = [f"{_share(k['share'])} of device time",
             f"{launches:.3g} launch{'es' if launches != 1 else ''} per call, {_ms(k['us_per_launch'] / 1e3)} each"]
    if "flops_per_s" in k and (compute_bound or "bytes_per_s" not in k):
        rate = _rate(k["flops_per_s"], "FLOP/s")
        if "flops_fraction" in k:
            rate += f" ({_share(k['flops_fraction'])} of peak FLOP rate)"
        parts.append(rate)
    elif "bytes_per_s" in k:
        rate = f"{_rate(k['bytes_per_s'], 'B/s')} over its tensor arguments' bytes"
        if "bandwidth_fraction" in k:
            rate += f" ({_share(k['bandwidth_fraction'])} of peak bandwidth)"
        parts.append(rate)
    compiled = [f"{k[key]} {word}" for key, word in (("registers", "registers"), ("spills", "spills"),
                                                       ("num_warps", "warps")) if k.get(key) is not None]
    if k.get("occupancy") is not None:
        compiled.append(f"occupancy {k['occupancy']:.0%}")
    if compiled:
        parts.append(", ".join(compiled))
    return f"`{k['name']}`: " + "; ".join(parts)


def error_excerpt(error: str, lines: int) -> str:
    """The first ``lines`` lines of the error: of the last exception a traceback shows (where its frames
    end: the message, and a compiler's pointer into the kernel), else of the text as it is."""
    text = error.strip().splitlines()
    start = 0
    for i, line in enumerate(text):
        if line.startswith("Traceback (most recent call last)"):
            start = i + 1
            while start < len(text) and (not text[start].strip() or text[start][0].isspace()):
                start += 1
    shown = text[start:start + lines]
    if len(text) > start + lines:
        shown.append(f"... ({len(text) - start - lines} more lines)")
    return "\n".join(shown)

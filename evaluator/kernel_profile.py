"""Where a timed call's device time goes, kernel by kernel (runs in the sandbox; pure functions).

The audited batch of the timed calls (``evaluator.timed_checks.audit``) already runs under
``torch.profiler`` on a GPU; :func:`aggregate` sums its device activity by name, and
:func:`breakdown` turns that into what the LLM's prompt shows of a candidate: each of its kernels'
share of the device time, launches per call and time per launch, and the rate it reached against the
GPU's measured peaks.  A kernel's bytes are those of the tensors it was passed (each storage once per
launch, as the launch counter records them: ``evaluator.guards``), so its bandwidth is the rate at which
it covered its arguments, not a hardware counter.  A FLOP rate is given only where one kernel has all
of the candidate's device time: the call's FLOPs cannot be split between kernels honestly.
:func:`with_compiled` adds each kernel's registers, spills and theoretical occupancy.

Nothing here runs on the CPU: the interpreter has no device profile, and a result without one says
nothing about kernels (``extra`` has no ``kernel_profile``).
"""
from __future__ import annotations

import math

# Launches per SM a GPU schedules at most (compute capability 8.0 and 9.0), and the shared memory the
# runtime reserves per block there: occupancy is bounded by these beside registers, warps and shared memory.
MAX_BLOCKS_PER_SM = 32
RESERVED_SHARED_PER_BLOCK = 1024
REGISTER_ALLOCATION_UNIT = 256  # registers are allocated per warp in units of this many


def aggregate(kernels: list[tuple[str, int, float]]) -> dict[str, dict]:
    """``kernels``: (name, stream, microseconds) of each device activity of the profiled calls;
    ``{name: {"us", "launches"}}``."""
    out: dict[str, dict] = {}
    for name, _stream, us in kernels:
        entry = out.setdefault(name, {"us": 0.0, "launches": 0})
        entry["us"] += us
        entry["launches"] += 1
    return out


def breakdown(times: dict[str, dict], calls: int, own: set[str], argument_bytes: dict[str, float],
              call_flops: float, bytes_per_s: float | None, flops_per_s: float | None, top_others: int = 3) -> dict:
    """The profile of ``calls`` profiled calls: ``times`` from :func:`aggregate`; ``own``: the
    candidate's kernel names; ``argument_bytes``: per kernel, its tensor arguments' bytes summed over
    its launches; ``call_flops``: the work of one call; the peaks (None: no rate against them).

    ``{"calls", "kernels": [{"name", "share", "launches_per_call", "us_per_launch",
    "bytes_per_s"?, "bandwidth_fraction"?, "flops_per_s"?, "flops_fraction"?}], "other_share", "others"}``,
    the kernels by share of device time, the largest first."""
    total = sum(t["us"] for t in times.values())
    if total <= 0 or calls <= 0:
        return {"calls": calls, "kernels": [], "other_share": 0.0, "others": []}
    mine = {name: t for name, t in times.items() if name in own}
    rows = []
    for name, t in sorted(mine.items(), key=lambda kv: -kv[1]["us"]):
        seconds = t["us"] * 1e-6
        row = {"name": name, "share": t["us"] / total, "launches_per_call": t["launches"] / calls,
               "us_per_launch": t["us"] / t["launches"]}
        moved = argument_bytes.get(name)
        if moved and seconds > 0:
            row["bytes_per_s"] = moved / seconds
            if bytes_per_s:
                row["bandwidth_fraction"] = row["bytes_per_s"] / bytes_per_s
        if len(mine) == 1 and call_flops > 0 and seconds > 0:
            row["flops_per_s"] = call_flops * calls / seconds
            if flops_per_s:
                row["flops_fraction"] = row["flops_per_s"] / flops_per_s
        rows.append(row)
    others = sorted(((name, t["us"]) for name, t in times.items() if name not in own), key=lambda kv: -kv[1])
    return {"calls": calls, "kernels": rows, "other_share": sum(us for _, us in others) / total,
            "others": [{"name": name[:80], "share": us / total} for name, us in others[:top_others]]}


def occupancy(registers: int | None, num_warps: int | None, shared_bytes: int | None, limits: dict) -> float | None:
    """Theoretical occupancy (active warps over the SM's most) of a kernel launched with ``num_warps``
    warps per program using ``registers`` per thread and ``shared_bytes``, on an SM of ``limits``
    (``{"max_threads_per_sm", "registers_per_sm", "shared_bytes_per_sm"}``); None where a figure is unknown."""
    threads, regs_per_sm = limits.get("max_threads_per_sm"), limits.get("registers_per_sm")
    smem_per_sm = limits.get("shared_bytes_per_sm")
    if not (registers and num_warps and threads and regs_per_sm and smem_per_sm) or shared_bytes is None:
        return None
    max_warps = threads // 32
    per_warp = math.ceil(registers * 32 / REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    by_registers = regs_per_sm // (per_warp * num_warps)
    by_shared = smem_per_sm // (shared_bytes + RESERVED_SHARED_PER_BLOCK)
    blocks = min(by_registers, by_shared, max_warps // num_warps, MAX_BLOCKS_PER_SM)
    return blocks * num_warps / max_warps


def with_compiled(profile: dict, compiled: list[dict], limits: dict) -> dict:
    """``profile`` with each kernel's compiled facts (``evaluator.guards.compiled_kernels``: registers,
    spills, warps) and its theoretical :func:`occupancy` on an SM of ``limits``, where known."""
    facts = {k["name"]: k for k in compiled}
    for row in profile["kernels"]:
        fact = facts.get(row["name"])
        if fact is None:
            continue
        for key in ("registers", "spills", "num_warps"):
            if fact.get(key) is not None:
                row[key] = fact[key]
        share = occupancy(fact.get("registers"), fact.get("num_warps"), fact.get("shared_bytes"), limits)
        if share is not None:
            row["occupancy"] = share
    return profile


def sm_limits(device: str) -> dict:
    """The SM's limits that occupancy depends on, as PyTorch reports them (a figure it does not report
    is left out, and occupancy with it)."""
    import torch

    props = torch.cuda.get_device_properties(device)
    names = {"max_threads_per_sm": "max_threads_per_multi_processor", "registers_per_sm": "regs_per_multiprocessor",
             "shared_bytes_per_sm": "shared_memory_per_multiprocessor"}
    return {key: getattr(props, attr) for key, attr in names.items() if getattr(props, attr, None)}

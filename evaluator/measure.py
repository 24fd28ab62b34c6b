"""Timing inside the evaluation (run in the sandboxed child, after the checks): the candidate side by
side with eager and the torch.compile baseline, racing, the timed calls' own checks, the roofline
fraction, the profiled calls' kernels (``evaluator.kernel_profile``) and per-shape timings; the
seconds of each part added to the evaluation's phases."""
from __future__ import annotations

import torch

from evaluator import baseline, kernel_profile, roofline
from evaluator.calls import call, make_inputs
from evaluator.compare import digest
from evaluator.guards import compiled_kernels
from evaluator.phases import Phases
from evaluator.fresh_inputs import FRESH_HOST_LIMIT_S, FreshInputs
from evaluator.spent_outputs import PoisonedAfter, spared_storages
from evaluator.timed_checks import (SET_SEED_STEP, TimedCalls, as_busy_unwatched, audit, busy_unwatched, check_kept,
                                    check_launches, check_outputs, in_turn, input_sets, inputs_unchanged)
from evaluator.timing import time_interleaved, time_side_by_side, timing_args


def numel(values) -> int:
    return sum(v.numel() for v in values if isinstance(v, torch.Tensor))


def measure(request: dict, problem, reference, invoker, shapes: list[dict], seed: int, device: str,
             phases: Phases, watch=None, repeatable_inputs: bool = True) -> dict:
    """Side-by-side timing on the largest shape (and on every shape set with ``time_shapes=all``):
    speedups, noise, roofline fraction, and the torch.compile baseline; the time of each part
    added to ``phases``.  ``invoker`` calls the candidate (``evaluator.invoke``); ``watch``
    (``evaluator.interpreter_state.StateWatch``) looks for changes to what the reference and the timer
    depend on after batches drawn at random; ``repeatable_inputs``: the task's inputs made again from a
    seed hold the same values (the checks' probe), which drawing them afresh between timed calls needs."""
    timing, shape = request["timing"], shapes[-1]
    with phases.timed("inputs_s"):
        inputs = make_inputs(problem, shape, seed, device)
        sets = input_sets(problem, shape, seed, device, timing, inputs)
        digests, in_place = _pristine(request, reference, sets)
    timed_calls: list[TimedCalls] = []  # every sequence of timed calls, each checked after timing
    fresh, fresh_off = _fresh(request, problem, shape, seed, device, sets, repeatable_inputs)
    candidate = _timed_calls(request, invoker, sets, device, timed_calls, in_place, fresh)
    spared = spared_storages(sets, reference)  # (evaluator.spent_outputs)
    baselines = {"reference": PoisonedAfter(in_turn(reference, sets, "reference timing"), spared)}
    compile_settings = request.get("compile_baseline") or {}
    backend, mode = compile_settings.get("backend", "inductor"), compile_settings.get("mode")
    measured = {"roofline_fraction": None, "roofline": None}
    if compile_settings.get("timing") == "live":
        try:
            with phases.timed("baseline_compile_s"):
                if watch is not None:  # inductor changes the interpreter: checked before, taken again after
                    watch.check("before the torch.compile baseline")
                compiled = baseline.compiled_reference(reference, inputs, backend=backend, mode=mode)
                if watch is not None:
                    watch.retake()
            baselines["compiled"] = PoisonedAfter(in_turn(compiled, sets, "torch.compile baseline"), spared)
        except Exception as exc:  # a reference the compiler cannot handle has no compiled baseline
            measured["compile_baseline_error"] = baseline.failure(exc)
    hooks = _hooks(request, problem, reference, watch)
    timed, go_on, batches = None, {}, {}
    race = request.get("race") or {}
    if race.get("bar") and race["reps"] < timing["reps"]:
        # Racing: a short first round against eager alone; a child clearly slower than the bar (its
        # parent's speedup) keeps that measurement, as its result's ``timing_round`` says.
        short = _timed_calls(request, invoker, sets, device, timed_calls, in_place, fresh)
        raw: list[list[float]] = [[], []]
        with phases.timed("race_s"):
            first = time_interleaved(short, {"reference": baselines["reference"]}, device,
                                     **dict(timing_args(timing), reps=race["reps"]), samples=raw, stats=batches,
                                     **hooks(short))
        pair = first["reference"]
        optimistic = pair.ratio * (1 + 2 * max(pair.noise, float(request.get("noise_floor", 0.0))))
        if optimistic < race["bar"] * (1 - race["margin"]):
            timed, candidate = first, short
            measured["timing_round"] = {"round": "short", "reps": race["reps"], "bar": race["bar"]}
        else:
            measured["timing_round"] = {"round": "full", "reps": timing["reps"], "bar": race["bar"]}
            if list(baselines) == ["reference"]:
                # The full round goes on from the short one: the same calls, warm, the same pairing
                # (a live torch.compile baseline has no samples in the short round: it starts afresh).
                # The kept outputs' reservoir carries on too.
                timed_calls.remove(candidate)
                candidate, go_on = short, {"samples": raw, "warmup": 0, "warmup_s": 0.0}
                measured["timing_round"]["from_short"] = len(raw[0])
    if timed is None:
        with phases.timed("interleaved_s"):  # warm-up, the timed calls, their synchronisations
            timed = time_interleaved(candidate, baselines, device, **{**timing_args(timing), **go_on}, stats=batches,
                                     **hooks(candidate))
    pair = timed["reference"]
    with phases.timed("timed_checks_s"):
        measured["timed_checks"] = _check_timed(request, problem, reference, timed_calls, candidate, timing, digests,
                                                timed_ms=pair.candidate.median_ms, fresh_off=fresh_off)
    # The time of the timed calls (GPU time on a GPU; medians times samples): the part of an evaluation
    # spent on what it measures.
    measured["timed_reps"] = pair.candidate.samples  # reps, or fewer: budget_s, racing, timing.precision
    if batches:  # on a GPU: batches of timed calls, and those run again because the host was late
        measured["timed_batches"] = batches
    measured["timed_calls_s"] = (pair.candidate.median_ms * pair.candidate.samples + sum(
        side.baseline.median_ms * side.baseline.samples for side in timed.values())) / 1e3
    noise_floor = float(request.get("noise_floor", 0.0))
    measured.update({
        "speedup": pair.ratio or None, "runtime_ms": pair.candidate.median_ms,
        "ref_runtime_ms": pair.baseline.median_ms, "runtime_spread": pair.candidate.spread,
        "ref_runtime_spread": pair.baseline.spread, "speedup_noise": max(pair.noise, noise_floor),
    })
    with phases.timed("roofline_s"):
        work = roofline.work_of(problem, inputs, lambda: call(reference, inputs, "reference"))
        peaks = roofline.peaks_for(request.get("roofline_peaks"))
    measured["work"] = f"{work.bytes / 1e6:.3g} MB, {work.flops / 1e9:.3g} GFLOP per call" + (
        "" if work.declared else " (bytes of inputs and outputs)") + ("" if work.flops_declared else " (FLOPs counted)")
    if peaks is not None:
        measured["roofline_fraction"] = roofline.fraction(work, pair.candidate.median_ms, peaks)
        floors = roofline.floors(work, peaks)
        measured["roofline"] = {"bytes_per_s": peaks.bytes_per_s, "flops_per_s": peaks.flops_for(work.dtype),
                                "source": peaks.source, **floors,
                                "flops_counted": not work.flops_declared,
                                # what the hardware limit is held to: the task's own declarations only
                                "checked_fraction": roofline.fraction(work, pair.candidate.median_ms, peaks,
                                                                      declared_only=True)}
    verified = measured["timed_checks"] or {}
    if "device_times" in verified:  # the audited batch's profile (on a GPU): kernel by kernel
        device_times = verified.pop("device_times")
        measured["kernel_profile"] = kernel_profile.breakdown(
            device_times["times"], verified["profiled_calls"], set(device_times["own"]),
            device_times["argument_bytes"], work.flops, peaks.bytes_per_s if peaks else None,
            peaks.flops_for(work.dtype) if peaks else None)
    if "compiled" in timed:
        measured["compiled_runtime_ms"] = timed["compiled"].baseline.median_ms
        measured["speedup_vs_compiled"] = timed["compiled"].ratio
    # compile_timing=cached: the evaluator chains its one measurement per task and device with
    # this evaluation's eager time (evaluator.baseline), nothing to do here.
    if request.get("time_shapes") == "all":
        with phases.timed("shape_timings_s"):
            measured["shape_timings"] = [
                *(_shape_timing(request, problem, reference, invoker, s, seed, device, noise_floor)
                  for s in shapes[:-1]),
                _shape_entry(shape, inputs, pair, noise_floor)]
    return measured


def _shape_timing(request: dict, problem, reference, invoker, shape: dict, seed: int, device: str,
                  noise_floor: float) -> dict:
    timing = request["timing"]
    inputs = make_inputs(problem, shape, seed, device)
    sets = input_sets(problem, shape, seed, device, timing, inputs)
    digests, in_place = _pristine(request, reference, sets)
    timed_calls: list[TimedCalls] = []
    candidate = _timed_calls(request, invoker, sets, device, timed_calls, in_place)
    timed_reference = PoisonedAfter(in_turn(reference, sets, "reference timing"), spared_storages(sets, reference))
    pair = time_side_by_side(candidate, timed_reference, device, **timing_args(timing),
                             **_hooks(request, problem, reference, None)(candidate))
    if request.get("timed_checks"):
        _check_timed(request, problem, reference, timed_calls, candidate, timing, digests, audited=False)
    return _shape_entry(shape, inputs, pair, noise_floor)


def _pristine(request: dict, reference, sets: list[list]) -> tuple[list, bool]:
    """The input sets' digests, to compare after timing, and whether the reference works in place (it
    changes the sets as it is timed: then no digests, and each kept call keeps a copy of its inputs)."""
    if not request.get("timed_checks"):
        return [], False
    digests = [digest(s) for s in sets]
    call(reference, sets[0], "reference")
    if digest(sets[0]) != digests[0]:
        return [], True
    return digests, False


def _fresh(request: dict, problem, shape: dict, seed: int, device: str, sets: list[list],
           repeatable: bool) -> tuple[FreshInputs | None, str]:
    """The timed input sets drawn afresh between calls (``evaluator.fresh_inputs``), where the timing
    asks it, the timed calls are checked, and the task's inputs are made again alike from a seed; else
    None, and why not (the result says it)."""
    timing = request["timing"]
    if not timing.get("fresh_inputs"):
        return None, "timing.fresh_inputs is off"
    if not request.get("timed_checks"):
        return None, "the timed calls are not checked (evaluator.timed_checks)"
    if not repeatable:
        return None, "get_inputs gives other values for the same seed"
    fresh = FreshInputs(lambda s: make_inputs(problem, shape, s, device), sets,
                        seeds=[seed + SET_SEED_STEP * k for k in range(len(sets))],
                        limit_bytes=float(timing.get("fresh_inputs_mb", 8192)) * (1 << 20),
                        room_bytes=_room(device, float(request.get("gpu_memory_fraction", 0.9))),
                        # on the CPU no batch is queued ahead of the host: its wall clock times each call
                        limit_s=FRESH_HOST_LIMIT_S if device.startswith("cuda") else float("inf"))
    return (None, fresh.off) if fresh.off else (fresh, "")


# Left free beside a set made again: what the candidate and the baselines allocate while timed.
ROOM_MARGIN_BYTES = 2 << 30


def _room(device: str, fraction: float) -> float:
    """Bytes this evaluation can still allocate for a set made again beside the timed ones, a margin
    kept: within its share of the GPU (``gpu_memory_fraction``) and what the GPU has free, its own
    cached blocks included (the CPU: no bound)."""
    if not device.startswith("cuda"):
        return float("inf")
    where = torch.device(device)
    free, total = torch.cuda.mem_get_info(where)
    allocated, reserved = torch.cuda.memory_allocated(where), torch.cuda.memory_reserved(where)
    return min(fraction * total - allocated, free + reserved - allocated) - ROOM_MARGIN_BYTES


def _timed_calls(request: dict, invoker, sets: list[list], device: str, made: list,
                 in_place: bool = False, fresh: FreshInputs | None = None) -> TimedCalls:
    """The candidate as timed (``evaluator.timed_checks``): ``timed_samples`` outputs kept, drawn after
    their calls, within timing's memory budget for extra input sets (none with timed checks off); every
    output with ``reverify``.  Added to ``made``."""
    checks, timing = request.get("timed_checks") or {}, request["timing"]
    made.append(TimedCalls(invoker, sets, device, keep=int(checks.get("samples", 0)),
                           keep_bytes=float(timing.get("input_sets_mb", 256)) * (1 << 20),
                           every=bool(checks) and bool(request.get("reverify")), keep_inputs=in_place,
                           fresh=fresh))
    return made[-1]


def _hooks(request: dict, problem, reference, watch):
    """The timer's hooks for one sequence of timed calls: after each call, whether its output is kept
    is drawn; after a batch, a re-verification checks every output kept in it, and the interpreter's
    state is compared after batches drawn at random."""
    checks = request.get("timed_checks")

    def hooks(timed: TimedCalls) -> dict:
        if not checks:
            return {"after_call": None, "after_batch": watch.sometimes if watch is not None else None}
        tolerances = _tolerances(request, problem)

        def after_batch() -> None:
            if timed.every:
                check_kept(timed, reference, *tolerances)
            if watch is not None:
                watch.sometimes()

        return {"before_call": timed.before, "after_call": timed.after, "after_batch": after_batch}

    return hooks


def _tolerances(request: dict, problem) -> tuple:
    return getattr(problem, "ATOL", request.get("tolerance")), getattr(problem, "RTOL", request.get("tolerance"))


def _check_timed(request: dict, problem, reference, made: list[TimedCalls], candidate: TimedCalls, timing: dict,
                 digests: list, audited: bool = True, timed_ms: float | None = None,
                 fresh_off: str = "") -> dict | None:
    """The timed calls held to the checks' rules (``evaluator.timed_checks``): the outputs kept and the
    round after the last timed call against the reference's, every call's launches, the inputs
    untouched, and one audited batch; what was verified, for the result's ``extra``."""
    checks = request.get("timed_checks")
    if not checks:
        return None
    tolerances = _tolerances(request, problem)
    for timed in made:  # a call that launched nothing, named before any output is compared
        check_launches(timed)
    verified = {"input_sets": len(candidate.sets),
                "outputs_checked": check_outputs(candidate, reference, *tolerances), "kept_checked": []}
    for timed in made:
        kept = [number + 1 for number, *_ in timed.kept]
        check_kept(timed, reference, *tolerances)
        verified["kept_checked"] += kept
    for timed in made:
        verified.update(check_launches(timed))
    if audited:
        names = {k["name"] for k in compiled_kernels()}
        calls, share_min = max(len(candidate.sets), int(timing.get("batch", 8))), float(checks["triton_share_min"])
        verified.update(audit(candidate, calls, names, share_min))
        if timed_ms is not None and not busy_unwatched(timed_ms, verified):
            # a GPU left idle before the audit may have run it below its clocks: once more, behind a spin
            # as long as timing's warm-up, before the candidate is held to it
            verified.update(audit(candidate, calls, names, share_min,
                                  lead_ms=max(200.0, 1e3 * float(timing.get("warmup_s", 0.0)))))
            as_busy_unwatched(timed_ms, verified)
    if digests:
        inputs_unchanged(candidate, candidate.fresh.digests(digests) if candidate.fresh else digests)
    verified["calls"] = sum(timed.calls for timed in made)
    fresh = candidate.fresh
    verified["fresh_inputs"] = bool(fresh) and not fresh.off  # every timed call's values new to it
    if not verified["fresh_inputs"]:
        verified["fresh_inputs_off"] = fresh.off if fresh else fresh_off
    if fresh and fresh.host_ms():
        verified["fresh_host_ms"] = fresh.host_ms()  # the draws' host time: [median, most]
    return verified


def _shape_entry(shape: dict, inputs: list, pair, noise_floor: float) -> dict:
    return {"shape": shape, "numel": numel(inputs), "speedup": pair.ratio or None,
            "speedup_noise": max(pair.noise, noise_floor), "runtime_ms": pair.candidate.median_ms,
            "ref_runtime_ms": pair.baseline.median_ms}

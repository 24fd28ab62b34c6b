"""Timing inside the evaluation (run in the sandboxed child, after the checks): the candidate side by
side with eager and the torch.compile baseline, racing, the timed calls' own checks, the roofline
fraction and per-shape timings; the seconds of each part added to the evaluation's phases."""
from __future__ import annotations

import torch

from evaluator import baseline, roofline
from evaluator.calls import call, make_inputs
from evaluator.guards import compiled_kernels
from evaluator.phases import Phases
from evaluator.timed_checks import TimedCalls, check_outputs, in_turn, input_sets, sampled_calls, triton_share
from evaluator.timing import time_interleaved, time_side_by_side, timing_args


def numel(values) -> int:
    return sum(v.numel() for v in values if isinstance(v, torch.Tensor))


def measure(request: dict, problem, reference, model, shapes: list[dict], seed: int, device: str,
             phases: Phases) -> dict:
    """Side-by-side timing on the largest shape (and on every shape set with ``time_shapes=all``):
    speedups, noise, roofline fraction, and the torch.compile baseline; the time of each part
    added to ``phases``."""
    timing, shape = request["timing"], shapes[-1]
    with phases.timed("inputs_s"):
        inputs = make_inputs(problem, shape, seed, device)
        sets = input_sets(problem, shape, seed, device, timing, inputs)
    candidate = _timed_calls(request, model, sets, seed, device)
    baselines = {"reference": in_turn(reference, sets, "reference timing")}
    compile_settings = request.get("compile_baseline") or {}
    backend, mode = compile_settings.get("backend", "inductor"), compile_settings.get("mode")
    measured = {"roofline_fraction": None, "roofline": None}
    if compile_settings.get("timing") == "live":
        try:
            with phases.timed("baseline_compile_s"):
                compiled = baseline.compiled_reference(reference, inputs, backend=backend, mode=mode)
            baselines["compiled"] = in_turn(compiled, sets, "torch.compile baseline")
        except Exception as exc:  # a reference the compiler cannot handle has no compiled baseline
            measured["compile_baseline_error"] = baseline.failure(exc)
    timed, go_on, batches = None, {}, {}
    race = request.get("race") or {}
    if race.get("bar") and race["reps"] < timing["reps"]:
        # Racing: a short first round against eager alone; a child clearly slower than the bar (its
        # parent's speedup) keeps that measurement, as its result's ``timing_round`` says.
        short = _timed_calls(request, model, sets, seed, device, calls=timing["warmup"] + race["reps"])
        raw: list[list[float]] = [[], []]
        with phases.timed("race_s"):
            first = time_interleaved(short, {"reference": baselines["reference"]}, device,
                                     **dict(timing_args(timing), reps=race["reps"]), samples=raw, stats=batches)
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
                # The guards' late samples (one per doubling of the call count) carry on too.
                candidate, go_on = short, {"samples": raw, "warmup": 0, "warmup_s": 0.0}
                measured["timing_round"]["from_short"] = len(raw[0])
    if timed is None:
        with phases.timed("interleaved_s"):  # warm-up, the timed calls, their synchronisations
            timed = time_interleaved(candidate, baselines, device, **{**timing_args(timing), **go_on}, stats=batches)
    with phases.timed("timed_checks_s"):
        measured["timed_checks"] = _check_timed(request, problem, reference, candidate, timing)
    pair = timed["reference"]
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
        "" if work.declared else " (bytes of inputs and outputs)")
    if peaks is not None:
        measured["roofline_fraction"] = roofline.fraction(work, pair.candidate.median_ms, peaks)
        measured["roofline"] = {"bytes_per_s": peaks.bytes_per_s, "flops_per_s": peaks.flops_per_s,
                                "source": peaks.source}
    if "compiled" in timed:
        measured["compiled_runtime_ms"] = timed["compiled"].baseline.median_ms
        measured["speedup_vs_compiled"] = timed["compiled"].ratio
    # compile_timing=cached: the evaluator chains its one measurement per task and device with
    # this evaluation's eager time (evaluator.baseline), nothing to do here.
    if request.get("time_shapes") == "all":
        with phases.timed("shape_timings_s"):
            measured["shape_timings"] = [
                *(_shape_timing(request, problem, reference, model, s, seed, device, noise_floor)
                  for s in shapes[:-1]),
                _shape_entry(shape, inputs, pair, noise_floor)]
    return measured


def _shape_timing(request: dict, problem, reference, model, shape: dict, seed: int, device: str,
                  noise_floor: float) -> dict:
    timing = request["timing"]
    inputs = make_inputs(problem, shape, seed, device)
    sets = input_sets(problem, shape, seed, device, timing, inputs)
    candidate = _timed_calls(request, model, sets, seed, device)
    pair = time_side_by_side(candidate, in_turn(reference, sets, "reference timing"), device, **timing_args(timing))
    if request.get("timed_checks"):
        check_outputs(candidate, reference, *_tolerances(request, problem))
    return _shape_entry(shape, inputs, pair, noise_floor)


def _timed_calls(request: dict, model, sets: list[list], seed: int, device: str,
                 calls: int | None = None) -> TimedCalls:
    """The candidate as timed, a seeded sample of its ``calls`` guarded (none with timed checks off)."""
    checks, timing = request.get("timed_checks") or {}, request["timing"]
    # The calls sure to run: with timing.precision a stable kernel may stop after min_reps rounds.
    calls = calls or timing["warmup"] + (min(timing["reps"], timing.get("min_reps", 20)) if timing.get("precision")
                                            else timing["reps"])
    sampled = sampled_calls(checks["samples"], calls, seed) if checks else set()
    return TimedCalls(model, sets, sampled, device)


def _tolerances(request: dict, problem) -> tuple:
    return getattr(problem, "ATOL", request.get("tolerance")), getattr(problem, "RTOL", request.get("tolerance"))


def _check_timed(request: dict, problem, reference, candidate: TimedCalls, timing: dict) -> dict | None:
    """The timed calls' outputs against the reference's and, on a GPU, one profiled batch
    (``evaluator.timed_checks``); what was verified, for the result's ``extra``."""
    checks = request.get("timed_checks")
    if not checks:
        return None
    verified = {"input_sets": len(candidate.sets),
                "outputs_checked": check_outputs(candidate, reference, *_tolerances(request, problem))}
    names = {k["name"] for k in compiled_kernels()}
    if candidate.device.startswith("cuda") and names:
        calls = max(len(candidate.sets), int(timing.get("batch", 8)))
        verified.update(triton_share(candidate, names, calls, float(checks["triton_share_min"])))
    verified["guarded_calls"] = candidate.audited
    return verified


def _shape_entry(shape: dict, inputs: list, pair, noise_floor: float) -> dict:
    return {"shape": shape, "numel": numel(inputs), "speedup": pair.ratio or None,
            "speedup_noise": max(pair.noise, noise_floor), "runtime_ms": pair.candidate.median_ms,
            "ref_runtime_ms": pair.baseline.median_ms}

"""The evaluation procedure, run inside a sandboxed child process.

Never imported by the engine's own process for running candidates: the
worker (``evaluator.worker``) forks a fresh child for each request and calls
:func:`handle` there.  Requests and results are plain dicts.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import torch

from evaluator.as_sent import load_module, request_digest, request_unchanged
from evaluator.calls import Failure, call, error_text, is_out_of_memory, make_inputs, synchronize
from evaluator.compare import mismatch
from evaluator.correctness import Verifier
from evaluator.dispatcher_state import Recorder
from evaluator.fp32_precision import convolution_precision, precision_for
from evaluator.guards import compiled_kernels
from evaluator.interpreter_state import StateWatch
from evaluator.invoke import Invoker
from evaluator.result import EvalResult, Status
from evaluator.static_checks import static_rejection
from evaluator import baseline, compile_seed, gate, kernel_profile, memory, roofline, seed_capture
from evaluator.gate import compile_sections, gpu_alone
from evaluator.measure import measure, numel
from evaluator.phases import Phases
from evaluator.timing import L2_FLUSH_BYTES

# The stage an evaluation failed at, by the phase it was in (``extra["stage"]``, shown to a repair).
STAGES = {"smoke_s": "smoke test", "adversarial_s": "adversarial values", "shapes_s": "shape sets",
          "timed_checks_s": "timed calls' checks", "reverify_s": "re-verification on fresh inputs"}


class Stage:
    """Where an evaluation is, named in the result of a failure: its step (``now``), refined by the
    phase a failure left (``evaluator.phases.Phases.failed_in``) among those ``watched``."""

    def __init__(self):
        self.now, self.watched = "static checks", []

    def failed(self) -> str:
        inner = next((p.failed_in for p in self.watched if p.failed_in), "")
        return STAGES.get(inner, self.now)


def handle(request: dict) -> dict:
    kind = request.get("kind", "evaluate")
    if request.get("device", "cpu").startswith("cuda"):
        precision_for(request.get("tolerance"))
        if torch.cuda.is_available():
            torch.cuda.set_per_process_memory_fraction(float(request.get("gpu_memory_fraction", 0.9)))
    if kind != "evaluate" or request.get("exclusive"):  # an evaluation's start goes on to read its task
        gate.host_start_over(request.get("gate_fds"))
    if kind == "check_task":
        return check_task(request)
    if kind == "compile_seed":
        return make_compile_seed(request)
    if kind == "evaluate":
        return evaluate(request).to_dict()
    if kind == "compile_baseline":
        return compile_baseline(request)
    if kind == "roofline_peaks":
        return roofline_peaks(request)
    raise ValueError(f"unknown request kind {kind!r}")


def select_shapes(problem, device: str, cpu_max_numel: int) -> list[dict]:
    """Shape sets to check, small to large; on the CPU only those that fit the interpreter."""
    shapes = [dict(s) for s in getattr(problem, "SHAPES", None) or [{}]]
    if device != "cpu":
        return shapes
    sizes = []
    for shape in shapes:
        with torch.device("meta"):  # sizes without allocating the inputs
            sizes.append(numel(problem.get_inputs(**shape)))
    fitting = [s for s, n in zip(shapes, sizes) if n <= cpu_max_numel]
    return fitting or [shapes[sizes.index(min(sizes))]]


def _build(cls, problem, device: str, on_device: bool = True):
    """``cls(*get_init_inputs())`` in eval mode on ``device``, seeded: the same initial weights for the
    reference and a candidate built alike.  ``on_device``: made there (PyTorch's factories under
    ``torch.device``: an 8192 x 8192 layer is not initialised on the CPU, about 0.5 s, and copied);
    else made on the CPU and moved, for a constructor that needs the CPU."""
    torch.manual_seed(0)
    if on_device and device != "cpu":
        with torch.device(device):
            return cls(*problem.get_init_inputs()).to(device).eval()
    return cls(*problem.get_init_inputs()).to(device).eval()


def build_reference(problem, device: str) -> tuple[torch.nn.Module, bool]:
    """The reference, made on the device if its constructor allows (else on the CPU), and where."""
    try:
        return _build(problem.Model, problem, device), device != "cpu"
    except Exception:  # a constructor that needs the CPU (numpy on a tensor, say): as KernelBench builds it
        return _build(problem.Model, problem, device, on_device=False), False


def check_task(request: dict) -> dict:
    """Load a problem file and run its reference on every admissible shape.

    Replies ``{"ok": True, "shapes", "warnings", "memory"}`` or ``{"ok": False, "error", "stage"}``
    (stage: ``load``, ``memory`` when the reference alone does not fit the GPU, ``reference``).
    """
    device, scratch = request["device"], Path(request["scratch"])
    stage = "load"
    try:
        problem = load_module(request["task_source"], scratch, "task")
        shapes = select_shapes(problem, device, request["cpu_max_numel"])
        model, _ = build_reference(problem, device)
        stage = "reference"
        warnings = []
        footprint = memory.reference_footprint(problem, model, shapes[-1], 0, device)
        atol, rtol = getattr(problem, "ATOL", None), getattr(problem, "RTOL", None)
        with torch.no_grad():
            for shape in shapes:
                first = model(*make_inputs(problem, shape, 0, device))
                second = model(*make_inputs(problem, shape, 1, device))
                # Outputs for different inputs that agree within the task's tolerance: a kernel
                # that ignores its inputs and returns a constant would pass the checks.
                if mismatch(first, second, atol, rtol) is None:
                    warnings.append(f"shape {shape}: the reference output barely depends on its inputs "
                                    "(outputs for two input seeds agree within the tolerance)")
                del first, second
        out = {"ok": True, "shapes": len(shapes), "warnings": warnings}
        if footprint:
            out["memory"] = {"reference_peak_mb": round(footprint / memory.MB, 1),
                             "device_mb": round(memory.device_total_mb(device), 1)}
        return out
    except Exception as exc:  # the user's reference: report whatever it raised
        if stage == "reference" and is_out_of_memory(exc):
            total = memory.device_total_mb(device)
            asked = re.search(r"Tried to allocate [\d.]+ \w+", str(exc))
            error = (f"the reference alone ran out of GPU memory on a {total / 1024:.0f} GiB device "
                     f"({float(request.get('gpu_memory_fraction', 0.9)):.0%} of it usable)"
                     + (f": {asked.group(0).lower()}" if asked else ""))
            return {"ok": False, "stage": "memory", "error": error, "traceback": error_text(exc)}
        if isinstance(exc, Failure):  # from calls.call: "reference: <error>"
            return {"ok": False, "stage": stage, "error": exc.reason.removeprefix("reference: "),
                    "traceback": exc.error}
        return {"ok": False, "stage": stage, "error": f"{type(exc).__name__}: {exc}", "traceback": error_text(exc)}


def make_compile_seed(request: dict) -> dict:
    """A seed kernel from inductor's Triton for the task's reference (on a GPU)."""
    device, scratch = request["device"], Path(request["scratch"])
    if not device.startswith("cuda"):
        return {"ok": False, "error": "seeds from torch.compile need a GPU (inductor generates Triton only for GPUs)"}
    captured: dict = {}  # inductor's output, kept in the reply whether or not it became a seed
    try:
        problem = load_module(request["task_source"], scratch, "task")
        reference, _ = build_reference(problem, device)
        shapes = select_shapes(problem, device, request["cpu_max_numel"])
        # Compiled and autotuned for the largest shape set, the one timed (no size-1 dims to
        # specialise on); for it alone where the task has one, for any where it has several.
        code, graph_inputs, configs = seed_capture.capture(
            reference, make_inputs(problem, shapes[-1], 0, device), gate_fds=request.get("gate_fds"),
            dynamic=len(shapes) > 1)
        captured = {"inductor_code": code, "graph_inputs": graph_inputs, "configs": configs}
        source = compile_seed.seed_from_inductor(
            code, graph_inputs, request["task_source"], configs=configs, origin=f", torch {torch.__version__}",
            conv_precision=convolution_precision(request.get("tolerance")))
        return {"ok": True, "source": source, **captured}
    except compile_seed.NoSeed as exc:
        return {"ok": False, "error": str(exc), **captured}
    except Exception as exc:  # the compiler or the user's reference
        return {"ok": False, "error": f"torch.compile failed: {type(exc).__name__}: {str(exc)[:500]}",
                "traceback": error_text(exc), "out_of_memory": is_out_of_memory(exc), **captured}


def evaluate(request: dict) -> EvalResult:
    device = request["device"]
    start = time.monotonic()
    # ``exclusive`` (an evaluation tried again after running out of GPU memory beside others):
    # the GPU alone from the start, not only while timing.
    whole = request.pop("gate_fds", None) if request.get("exclusive") else None
    stage = Stage()
    try:
        with gpu_alone(whole):
            result = _evaluate(request, device, stage)
    except Failure as failure:
        result = EvalResult(status=failure.status, reason=failure.reason, error=failure.error)
        result.extra["stage"] = stage.failed()
        if failure.out_of_memory:  # the host tries it again alone on the GPU (evaluator.replies.out_of_memory)
            result.extra["out_of_memory"] = True
    result.device = _device_name(device)
    result.wall_s = time.monotonic() - start
    result.extra["environment"] = dict(request.get("environment") or {}, gpu=result.device)
    return result


def compile_baseline(request: dict) -> dict:
    """The torch.compile baseline of a task, timed against eager on its largest shape set, in a
    process that runs no candidate code: ``{"ratio", "compiled_ms", "eager_ms", ...}`` or ``{"error"}``.
    The evaluator asks once per task and device and hands the ratio to the task's evaluations."""
    device = request["device"]
    whole = request.pop("gate_fds", None) if request.get("exclusive") else None
    try:
        with gpu_alone(whole):
            problem = load_module(request["task_source"], Path(request["scratch"]), "task")
            reference, _ = build_reference(problem, device)
            shape = select_shapes(problem, device, request["cpu_max_numel"])[-1]
            inputs = make_inputs(problem, shape, request["seeds"][0], device)
            settings = request["compile_baseline"]
            return baseline.compiled_over_eager(reference, inputs, device=device, backend=settings["backend"],
                                                mode=settings.get("mode"), timing=request["timing"],
                                                gate_fds=request.get("gate_fds"))
    except Exception as exc:  # the user's reference, or the GPU's memory beside other evaluations
        return {"error": f"the reference failed before its torch.compile baseline: {type(exc).__name__}: "
                         f"{str(exc)[:300]}", "out_of_memory": is_out_of_memory(exc)}


def roofline_peaks(request: dict) -> dict:
    """This GPU's peak bandwidth and fp16 matmul throughput, measured alone on it (a 1 GiB copy and
    8192² matmuls, fp16 and TF32: 2.3 GB, in no evaluation's memory peak):
    ``{"bytes_per_s", "flops_per_s", "tf32_flops_per_s", "source"}``."""
    try:
        with gpu_alone(request.get("gate_fds")):
            peaks = roofline.measure_peaks(request["device"])
    except Exception as exc:  # out of memory beside other evaluations, say: no roofline fraction then
        return {"error": f"measuring the GPU's peaks: {type(exc).__name__}: {str(exc)[:300]}"}
    return {"bytes_per_s": peaks.bytes_per_s, "flops_per_s": peaks.flops_per_s,
            "tf32_flops_per_s": peaks.tf32_flops_per_s, "source": peaks.source}


def _device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "cpu (Triton interpreter)"


def _evaluate(request: dict, device: str, stage: Stage) -> EvalResult:
    source = request["candidate_source"]
    rejection = static_rejection(source)
    if rejection:
        raise Failure(Status.REJECTED, rejection)
    scratch = Path(request["scratch"])
    phases = Phases()  # load_s, checks_s, timing_s, and the parts of each
    began = time.monotonic()
    if device.startswith("cuda"):
        with phases.timed("cuda_init_s"):  # the forked child's own CUDA context
            torch.empty(1, device=device)
    with phases.timed("reference_s"):
        problem = load_module(request["task_source"], scratch, "task")
        shapes = select_shapes(problem, device, request["cpu_max_numel"])
    # The start is host work, spared by a pipeline's timing gate; the GPU from here on.
    gate.host_start_over(request.get("gate_fds"))
    if gate.start_wait_s:
        phases["start_gate_wait_s"] = gate.start_wait_s
        began += gate.start_wait_s
    with phases.timed("reference_s"):
        reference, on_device = build_reference(problem, device)
        reference_bytes, operators = _reference_alone(problem, reference, shapes, request["seeds"][0], device)
    with phases.timed("state_s"):  # what the reference and the timer depend on, before any candidate code
        watch = StateWatch(problem, reference, operators=operators)
    if device.startswith("cuda"):  # in a pipeline, this candidate's JIT compiles overlap another's timing
        compile_sections(request.get("gate_fds"), torch.cuda.synchronize)
    stage.now = "loading the module"
    asked = request_digest(request)  # what the host asked, before any candidate code runs
    try:
        candidate = load_module(source, scratch, "candidate")
    except Exception as exc:
        raise Failure(Status.COMPILE_ERROR, f"loading the candidate: {type(exc).__name__}: {exc}",
                       error_text(exc)) from exc
    model, stage.now = None, "building ModelNew"
    if on_device:
        try:
            model = _build(candidate.ModelNew, problem, device)
        except Exception:  # a constructor that needs the CPU: both made there, the same weights again
            watch.check("once loaded")
            reference = _build(problem.Model, problem, device, on_device=False)
            watch.reference = reference
            watch.retake()  # the new reference's own modules; nothing of the candidate's ran since
    if model is None:
        try:
            model = _build(candidate.ModelNew, problem, device, on_device=False)
        except Exception as exc:
            raise Failure(Status.RUNTIME_ERROR, f"ModelNew(...): {type(exc).__name__}: {exc}",
                          error_text(exc)) from exc
    with phases.timed("state_s"):
        watch.check("once loaded and built")
    request_unchanged(request, asked, "once loaded and built")
    invoker = Invoker(model, device)  # every call of the candidate from here on
    try:
        result = _checked_and_timed(request, device, problem, reference, invoker, watch, shapes, phases, began,
                                    reference_bytes, stage)
        request_unchanged(request, asked, "after its checks and timing")
        return result
    except Failure as failure:
        if failure.status is not Status.REJECTED:  # a reference the candidate altered fails the checks too
            watch.check("when its checks failed", dispatcher=True)
        raise
    finally:
        invoker.close()


def _reference_alone(problem, reference, shapes, seed: int, device: str):
    """Before any candidate code runs: the reference's own memory peak on the largest shape set, and
    the operators that it (on every shape set), the comparison and the harness dispatch, whose
    dispatcher tables the state checks read (``evaluator.dispatcher_state``)."""
    recorder = Recorder()
    with recorder(), torch.no_grad():
        peak = memory.reference_footprint(problem, reference, shapes[-1], seed, device)
        for shape in shapes[:-1] if peak is not None else shapes:  # the largest has run where measured
            call(reference, make_inputs(problem, shape, seed, device), "reference")
        probe = torch.zeros(8, device=device)
        mismatch(probe, probe.clone(), None, None)
    return peak, recorder.operators()


def _checked_and_timed(request: dict, device: str, problem, reference, invoker, watch, shapes, phases, began,
                       reference_bytes, stage: Stage) -> EvalResult:
    phases["load_s"] = time.monotonic() - began
    verifier = Verifier(problem, reference, invoker, device, watch, request.get("tolerance"))
    stage.now, stage.watched = "correctness checks", [verifier.phases, phases]
    checks = verifier.run(shapes, list(request["seeds"]))
    stage.now = "timing"
    phases["checks_s"] = time.monotonic() - began - phases["load_s"]
    phases.update(verifier.phases)
    checks_bytes = memory.phase_peak(device)
    with phases.timed("state_s"):
        watch.check("after the checks")
    kernels = compiled_kernels()
    # Timing shares the GPU with no other evaluation; after it, host work alone (the result).
    with gpu_alone(request.get("gate_fds"), phases, host_after=lambda: synchronize(device)):
        timed_from = time.time()
        measured = measure(request, problem, reference, invoker, shapes, request["seeds"][0], device, phases, watch,
                           repeatable_inputs=verifier.repeatable_inputs)
        limit = request.get("roofline_limit") or float("inf")
        extra = {"kernels": kernels} if kernels else {}
        if measured["roofline"] is not None and measured["roofline"]["checked_fraction"] > limit:
            # Faster than the hardware allows: check everything again on fresh inputs and time again.
            fresh = [seed + 7919 for seed in request["seeds"]]
            with phases.timed("reverify_s"):
                again = Verifier(problem, reference, invoker, device, watch, request.get("tolerance"))
                again.run(shapes, fresh)
            first, measured = measured, measure(request, problem, reference, invoker, shapes, fresh[0], device,
                                                phases, watch, repeatable_inputs=again.repeatable_inputs)
            extra["reverified"] = {"roofline_fraction": first["roofline"]["checked_fraction"],
                                   "speedup": first["speedup"]}
            if measured["roofline"]["checked_fraction"] > limit:
                raise Failure(Status.REJECTED,
                              f"{measured['roofline']['checked_fraction']:.2f}x the hardware roofline "
                              f"({measured['work']}) after re-verification on fresh inputs: the candidate "
                              "skips work, or the task's flops/bytes_moved are wrong")
        extra["timed_window"] = [timed_from, time.time()]  # wall clock: pipelined timings never overlap
    with phases.timed("state_s"):  # after the last call of the candidate
        watch.check("after timing", dispatcher=True)
    phases["timing_s"] = (time.monotonic() - began - phases["load_s"] - phases["checks_s"]
                          - phases.get("gate_wait_s", 0.0))
    if gate.compile_wait_s:  # after its compiles, waiting for another evaluation's timing
        phases["compile_gate_wait_s"] = gate.compile_wait_s
    phases["timed_calls_s"] = measured.pop("timed_calls_s")
    extra.update(phases=dict(phases), roofline=measured.pop("roofline"), work=measured.pop("work"))
    footprint = memory.report(reference_bytes, device, checks_bytes, memory.phase_peak(device),
                              L2_FLUSH_BYTES if device.startswith("cuda") else 0)
    if footprint:
        extra["memory"] = footprint
    profile = measured.pop("kernel_profile", None)
    if profile is not None:  # on a GPU: each kernel's compiled facts and occupancy beside its device time
        extra["kernel_profile"] = kernel_profile.with_compiled(profile, kernels, kernel_profile.sm_limits(device))
    extra.update(verifier.held())
    for key in ("compile_baseline_error", "shape_timings", "timed_checks", "timing_round", "timed_reps", "timed_batches"):
        value = measured.pop(key, None)
        if value is not None:
            extra[key] = value
    return EvalResult(
        status=Status.CORRECT,
        reason=f"passed {checks} checks: smoke, adversarial values{verifier.range_note()}, "
               f"{len(shapes)} shapes x "
               f"{len(request['seeds'])} seeds, each called twice around the reference"
               + (", and the timed calls" if "timed_checks" in extra else "")
               + verifier.float64_note(),
        timing_representative=device.startswith("cuda"),
        shapes_checked=len(shapes),
        extra=extra,
        **measured,
        **{fact: max((k[fact] for k in kernels if k[fact] is not None), default=None)
           for fact in ("registers", "spills", "shared_bytes", "num_warps", "num_stages")},
    )

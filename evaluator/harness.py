"""The evaluation procedure, run inside a sandboxed child process.

Never imported by the engine's own process for running candidates: the
worker (``evaluator.worker``) forks a fresh child for each request and calls
:func:`handle` there.  Requests and results are plain dicts.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
import time
import traceback
from pathlib import Path

import torch

from evaluator.compare import mismatch
from evaluator.result import EvalResult, Status, trim
from evaluator.static_checks import static_rejection
from evaluator.timing import time_side_by_side

_COMPILE_ERRORS = ("CompilationError", "OutOfResources", "CompileTimeAssertionFailure")


class _Failure(Exception):
    def __init__(self, status: Status, reason: str, error: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


def handle(request: dict) -> dict:
    kind = request.get("kind", "evaluate")
    if kind == "check_task":
        return check_task(request)
    if kind == "evaluate":
        return evaluate(request).to_dict()
    raise ValueError(f"unknown request kind {kind!r}")


def _load_module(source: str, scratch: Path, prefix: str):
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    path = scratch / f"{prefix}_{digest}.py"
    path.write_text(source, encoding="utf-8")
    name = f"{prefix}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit and dataclasses look modules up by name
    spec.loader.exec_module(module)
    return module


def _error_text(exc: BaseException) -> str:
    return trim("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def _is_compile_error(exc: BaseException) -> bool:
    seen = exc
    while seen is not None:
        if any(t.__name__ in _COMPILE_ERRORS for t in type(seen).__mro__):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def _numel(values) -> int:
    return sum(v.numel() for v in values if isinstance(v, torch.Tensor))


def select_shapes(problem, device: str, cpu_max_numel: int) -> list[dict]:
    """Shape sets to check, small to large; on the CPU only those that fit the interpreter."""
    shapes = [dict(s) for s in getattr(problem, "SHAPES", None) or [{}]]
    if device != "cpu":
        return shapes
    sizes = []
    for shape in shapes:
        with torch.device("meta"):  # sizes without allocating the inputs
            sizes.append(_numel(problem.get_inputs(**shape)))
    fitting = [s for s, n in zip(shapes, sizes) if n <= cpu_max_numel]
    return fitting or [shapes[sizes.index(min(sizes))]]


def _make_inputs(problem, shape: dict, seed: int, device: str) -> list:
    torch.manual_seed(seed)
    return list(_to_device(problem.get_inputs(**shape), device))


def _build(cls, problem, device: str):
    torch.manual_seed(0)  # the same initial weights for reference and candidate
    return cls(*problem.get_init_inputs()).to(device).eval()


def check_task(request: dict) -> dict:
    """Load a problem file and run its reference on every admissible shape."""
    device, scratch = request["device"], Path(request["scratch"])
    try:
        problem = _load_module(request["task_source"], scratch, "task")
        shapes = select_shapes(problem, device, request["cpu_max_numel"])
        model = _build(problem.Model, problem, device)
        warnings = []
        with torch.no_grad():
            for shape in shapes:
                first = model(*_make_inputs(problem, shape, 0, device))
                second = model(*_make_inputs(problem, shape, 1, device))
                if all(isinstance(t, torch.Tensor) and torch.equal(a, t)
                       for a, t in zip(_flat(first), _flat(second))):
                    warnings.append(f"shape {shape}: the reference output does not change with its inputs")
        return {"ok": True, "shapes": len(shapes), "warnings": warnings}
    except Exception as exc:  # the user's reference: report whatever it raised
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": _error_text(exc)}


def _flat(outputs):
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def evaluate(request: dict) -> EvalResult:
    device = request["device"]
    start = time.monotonic()
    try:
        result = _evaluate(request, device)
    except _Failure as failure:
        result = EvalResult(status=failure.status, reason=failure.reason, error=failure.error)
    result.device = _device_name(device)
    result.wall_s = time.monotonic() - start
    return result


def _device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "cpu (Triton interpreter)"


def _call(model, inputs, stage: str):
    try:
        with torch.no_grad():
            return model(*inputs)
    except Exception as exc:
        status = Status.COMPILE_ERROR if _is_compile_error(exc) else Status.RUNTIME_ERROR
        raise _Failure(status, f"{stage}: {type(exc).__name__}: {str(exc)[:300]}", _error_text(exc)) from exc


def _evaluate(request: dict, device: str) -> EvalResult:
    source = request["candidate_source"]
    rejection = static_rejection(source)
    if rejection:
        raise _Failure(Status.REJECTED, rejection)
    scratch = Path(request["scratch"])
    problem = _load_module(request["task_source"], scratch, "task")
    try:
        candidate = _load_module(source, scratch, "candidate")
    except Exception as exc:
        raise _Failure(Status.COMPILE_ERROR, f"loading the candidate: {type(exc).__name__}: {exc}",
                       _error_text(exc)) from exc
    reference = _build(problem.Model, problem, device)
    try:
        model = _build(candidate.ModelNew, problem, device)
    except Exception as exc:
        raise _Failure(Status.RUNTIME_ERROR, f"ModelNew(...): {type(exc).__name__}: {exc}",
                       _error_text(exc)) from exc

    atol, rtol = getattr(problem, "ATOL", None), getattr(problem, "RTOL", None)
    shapes = select_shapes(problem, device, request["cpu_max_numel"])
    for shape in shapes:
        for seed in request["seeds"]:
            inputs = _make_inputs(problem, shape, seed, device)
            pristine = _clone(inputs)
            expected = _call(reference, _clone(inputs), "reference")
            actual = _call(model, inputs, f"shape {shape or 'default'}")
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            problem_text = mismatch(expected, actual, atol, rtol)
            if problem_text is None and mismatch(pristine, inputs, 0.0, 0.0) is not None:
                problem_text = "the candidate modified its inputs in place"
            if problem_text:
                raise _Failure(Status.INCORRECT, f"shape {shape or 'default'}, seed {seed}: {problem_text}")

    timing = request["timing"]
    inputs = _make_inputs(problem, shapes[-1], request["seeds"][0], device)
    cand, ref = time_side_by_side(
        lambda: _call(model, inputs, "timing"), lambda: _call(reference, inputs, "reference timing"),
        device, warmup=timing["warmup"], reps=timing["reps"], budget_s=timing["budget_s"],
    )
    return EvalResult(
        status=Status.CORRECT,
        reason=f"matched the reference on {len(shapes)} shapes x {len(request['seeds'])} seeds",
        speedup=ref.median_ms / cand.median_ms if cand.median_ms > 0 else None,
        runtime_ms=cand.median_ms,
        ref_runtime_ms=ref.median_ms,
        runtime_spread=cand.spread,
        timing_representative=device.startswith("cuda"),
        shapes_checked=len(shapes),
    )

"""Calling untrusted candidates and classifying what goes wrong (runs in the sandbox)."""
from __future__ import annotations

import traceback

import torch

from evaluator.result import Status, trim

_COMPILE_ERRORS = ("CompilationError", "OutOfResources", "CompileTimeAssertionFailure")


class Failure(Exception):
    """Ends an evaluation with a status, a one-line reason and a trimmed traceback."""

    def __init__(self, status: Status, reason: str, error: str = ""):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error


def error_text(exc: BaseException) -> str:
    return trim("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def is_compile_error(exc: BaseException) -> bool:
    seen = exc
    while seen is not None:
        if any(t.__name__ in _COMPILE_ERRORS for t in type(seen).__mro__):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def call(model, inputs, stage: str):
    """``model(*inputs)`` without autograd; any exception becomes a classified Failure."""
    try:
        with torch.no_grad():
            return model(*inputs)
    except Exception as exc:
        status = Status.COMPILE_ERROR if is_compile_error(exc) else Status.RUNTIME_ERROR
        raise Failure(status, f"{stage}: {type(exc).__name__}: {str(exc)[:300]}", error_text(exc)) from exc


def to_device(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(clone(v) for v in value)
    return value


def make_inputs(problem, shape: dict, seed: int, device: str) -> list:
    torch.manual_seed(seed)
    return list(to_device(problem.get_inputs(**shape), device))


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()

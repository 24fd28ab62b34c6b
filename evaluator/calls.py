"""Calling untrusted candidates and classifying what goes wrong (runs in the sandbox)."""
from __future__ import annotations

import random
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


def seed_everything(seed: int) -> None:
    """torch (CPU and every GPU), Python's and NumPy's generators: a problem's ``get_inputs`` may use any."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % (1 << 32))
    except ImportError:
        pass


def make_inputs(problem, shape: dict, seed: int, device: str) -> list:
    """``problem.get_inputs(**shape)`` seeded, on ``device``.

    On a GPU the inputs are created there (``torch.device`` as the default device), not on the CPU and
    copied: a KernelBench input of several GB costs no host memory and no copy.  A ``get_inputs``
    that cannot run that way (it hands a CPU tensor to NumPy, say) runs on the CPU, then its inputs move.
    Each worker of one GPU model draws the same values for the same seed.  The generators are then
    seeded afresh, so that code called next never sees the same random stream twice (a candidate's
    own randomness must show as non-determinism).
    """
    try:
        if device != "cpu":
            seed_everything(seed)
            try:
                with torch.device(device):
                    return list(to_device(problem.get_inputs(**shape), device))
            except Exception:  # noqa: BLE001 (a get_inputs that needs the CPU; a real error shows again below)
                pass
        seed_everything(seed)
        return list(to_device(problem.get_inputs(**shape), device))
    finally:
        torch.seed()
        random.seed()


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()

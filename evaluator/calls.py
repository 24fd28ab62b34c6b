"""Calling untrusted candidates and classifying what goes wrong (runs in the sandbox)."""
from __future__ import annotations

import random
import traceback

import torch

from evaluator.result import Status, trim

_COMPILE_ERRORS = ("CompilationError", "OutOfResources", "CompileTimeAssertionFailure")
# Under Triton's interpreter (TRITON_INTERPRET=1) a kernel's body runs as Python, and whatever it raises
# comes back as an InterpreterError around the original exception.  On a GPU the same body is traced by
# the compiler's front end, which raises every such exception as a CompilationError before anything runs:
# an unknown `tl.` attribute, an undefined name, incompatible shapes, a non-power-of-2 `tl.arange`, a failed
# `tl.static_assert`.  Only these interpreter calls fail because of the values a kernel meets at run time,
# as a device-side assert does on a GPU.
_INTERPRETER_RUN_TIME = {"create_assert", "create_assume"}


class Failure(Exception):
    """Ends an evaluation with a status, a one-line reason and a trimmed traceback."""

    def __init__(self, status: Status, reason: str, error: str = "", out_of_memory: bool = False):
        super().__init__(reason)
        self.status, self.reason, self.error = status, reason, error
        self.out_of_memory = out_of_memory  # the GPU's memory ran out (told apart from a message that says so)


def error_text(exc: BaseException) -> str:
    return trim("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def _chain(exc: BaseException):
    seen, visited = exc, set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        yield seen
        seen = seen.__cause__ or seen.__context__


def _kernel_error(exc: BaseException) -> BaseException:
    """What the kernel's body raised, where the interpreter wrapped it (its repr) in InterpreterErrors."""
    chain = list(_chain(exc))
    if any(type(e).__name__ == "InterpreterError" for e in chain):
        return chain[-1]
    return exc


def _fails_at_run_time(interpreter_error: BaseException) -> bool:
    """Whether the exception under an InterpreterError came from the values met, not from the kernel's code."""
    root = list(_chain(interpreter_error))[-1]
    frames = traceback.extract_tb(root.__traceback__)
    if frames and frames[-1].name in _INTERPRETER_RUN_TIME and "interpreter" in frames[-1].filename:
        return True
    # The interpreter cannot run this (inline assembly, extern libraries): no verdict on the kernel's code.
    return isinstance(root, NotImplementedError) and "interpreter mode" in str(root)


def is_compile_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the compiler refusing the kernel, the same verdict on a GPU and under the interpreter."""
    for seen in _chain(exc):
        names = {t.__name__ for t in type(seen).__mro__}
        if names.intersection(_COMPILE_ERRORS):
            return True
        if "InterpreterError" in names:
            return not _fails_at_run_time(seen)
    return False


def call(model, inputs, stage: str):
    """``model(*inputs)`` without autograd (the reference, a baseline); any exception becomes a
    classified Failure."""
    try:
        with torch.no_grad():
            return model(*inputs)
    except Exception as exc:
        raise _failure(exc, stage) from exc


def call_candidate(invoker, inputs, stage: str, mode=None):
    """The candidate called through ``invoker`` (``evaluator.invoke``: the one way every candidate call
    is made; ``stage`` stays on this thread); returns its :class:`~evaluator.invoke.Outcome`, and
    whatever it raised becomes a classified Failure."""
    outcome = invoker(inputs, mode)
    if outcome.raised is not None:
        if not isinstance(outcome.raised, Exception):  # KeyboardInterrupt, SystemExit: not the kernel's
            raise outcome.raised
        raise _failure(outcome.raised, stage) from outcome.raised
    return outcome


def _failure(exc: Exception, stage: str) -> Failure:
    status = Status.COMPILE_ERROR if is_compile_error(exc) else Status.RUNTIME_ERROR
    cause = _kernel_error(exc)
    where = " (in a Triton kernel)" if cause is not exc else ""
    return Failure(status, f"{stage}: {type(cause).__name__}{where}: {str(cause)[:300]}", error_text(exc),
                   out_of_memory=is_out_of_memory(exc))


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is the GPU running out of memory: PyTorch's
    ``OutOfMemoryError``, or the CUDA driver's own error of that name.  Decided here, in the
    sandbox, on the exception itself; the host reads the verdict, never the message."""
    for seen in _chain(exc):
        if isinstance(seen, torch.cuda.OutOfMemoryError):
            return True
        if isinstance(seen, RuntimeError) and "CUDA error: out of memory" in str(seen):
            return True  # raised by the driver through torch (cudaErrorMemoryAllocation)
    return False


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
    that cannot run that way (it hands a CPU tensor to NumPy, say) runs on the CPU, then its inputs move;
    one that runs out of GPU memory raises that.
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
            except Exception as exc:  # noqa: BLE001 (a get_inputs that needs the CPU; a real error shows again below)
                if is_out_of_memory(exc):
                    # Not the CPU's generator instead: its values differ from the GPU's, and a check (or a
                    # set drawn afresh) would compare calls on inputs of other values.  Running out of
                    # memory is handled as such by the evaluation (run again with the GPU to itself).
                    raise
        seed_everything(seed)
        return list(to_device(problem.get_inputs(**shape), device))
    finally:
        torch.seed()
        random.seed()


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()

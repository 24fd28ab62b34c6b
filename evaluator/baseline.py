"""The ``torch.compile`` baseline: how fast the compiler makes the reference.

Two ways to time it (``evaluator.compile_timing``):

- ``live``: every evaluation compiles the reference (inductor's cache in the
  worker's scratch directory is warm after the task's first candidate; the
  worker cannot import the compiler before forking, since importing inductor
  initialises CUDA) and times it interleaved with the candidate and the eager
  reference, call by call.
- ``cached``: the evaluator asks once per task and device (a request of its
  own, ``compile_baseline``, on a worker of its own beside the pipeline's, in a
  process that runs no candidate code): the
  reference compiled and timed against eager side by side; later candidates
  chain that ratio with their own side-by-side ratio to eager:
  ``compiled_ms = eager_ms(this run) * compiled/eager``.  Cheaper (no compile
  per evaluation), but not live.
"""
from __future__ import annotations

import torch

from evaluator.calls import call, is_out_of_memory, synchronize
from evaluator.gate import gpu_alone, host_section
from evaluator.timing import time_side_by_side, timing_args


# Modes whose compile runs nothing on the GPU (max-autotune benchmarks its choices while compiling).
HOST_ONLY_MODES = (None, "default", "reduce-overhead")


def compiled_reference(reference, inputs: list, *, backend: str, mode: str | None, device: str = "cpu",
                       gate_fds: list[int] | None = None):
    """The reference compiled by ``torch.compile`` and called once (which compiles it).  With a timing
    gate (``gate_fds``), inductor's compile is host work that another evaluation's timing need not stop
    (:func:`evaluator.gate.host_section`); the first call's kernels and their autotuning are not."""
    import torch._inductor.compile_fx as compile_fx_module
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1  # no compile pool inside the sandboxed child
    compiled = torch.compile(reference, backend=backend, mode=mode)
    original = compile_fx_module.compile_fx
    if gate_fds and backend == "inductor" and mode in HOST_ONLY_MODES:
        def spared(*args, **kwargs):  # inductor's wrapper looks compile_fx up in its module at each call
            with host_section(gate_fds, lambda: synchronize(device)):
                return original(*args, **kwargs)

        compile_fx_module.compile_fx = spared
    try:
        call(compiled, inputs, "torch.compile baseline")
    finally:
        compile_fx_module.compile_fx = original
    return compiled


def failure(exc: Exception) -> str:
    return f"torch.compile failed: {type(exc).__name__}: {str(exc)[:300]}"


def compiled_over_eager(reference, inputs: list, *, device: str, backend: str, mode: str | None, timing: dict,
                        gate_fds: list[int] | None = None) -> dict:
    """``{"ratio": compiled_ms / eager_ms, ...}`` on ``inputs``, or ``{"error": ...}``: compiled outside
    the timing gate (host work), timed under it."""
    try:
        compiled = compiled_reference(reference, inputs, backend=backend, mode=mode, device=device,
                                      gate_fds=gate_fds)
        with gpu_alone(gate_fds, host_after=lambda: synchronize(device)):  # then only the reply: host work
            pair = time_side_by_side(lambda: call(compiled, inputs, "torch.compile baseline"),
                                     lambda: call(reference, inputs, "reference timing"), device,
                                     **timing_args(timing))
    except Exception as exc:  # a reference the compiler cannot handle has no compiled baseline
        return {"error": failure(exc), "out_of_memory": is_out_of_memory(exc)}
    return {"ratio": pair.candidate.median_ms / pair.baseline.median_ms, "backend": backend, "mode": mode,
            "compiled_ms": pair.candidate.median_ms, "eager_ms": pair.baseline.median_ms}

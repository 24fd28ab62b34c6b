"""Staged correctness checks of a candidate against its reference (runs in the sandbox).

Cheapest first, stopping at the first failure:

1. smoke: the smallest shape, first seed, with the anti-cheat guards (the
   candidate must launch a Triton kernel, dispatch no heavy PyTorch operator,
   leave no thread running and keep the timing functions intact);
2. adversarial values on the smallest shape: very large, very small, mixed
   scales, all-equal;
3. every shape set (small to large, awkward sizes included) for every seed.

Every check calls the candidate, then the reference, then the candidate again,
with uninitialised allocations poisoned: both candidate outputs must match the
reference within tolerance, be bitwise identical to each other, and leave the
inputs as they were.
"""
from __future__ import annotations

import threading

import torch

from evaluator.calls import Failure, call, clone, make_inputs, synchronize
from evaluator.compare import mismatch
from evaluator.guards import CandidateMonitor, extra_threads, install_launch_counter, launch_count, timers_tampered
from evaluator.result import Status

# Scales for the adversarial inputs: wide for fp32/fp64, kept in range for half types.
_SCALES = {torch.float32: (1e3, 1e-3), torch.float64: (1e3, 1e-3)}
_HALF_SCALES = (8.0, 1e-2)


def adversarial_variants(inputs: list) -> list[tuple[str, list]]:
    floats = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not floats:
        return []
    large, small = _SCALES.get(floats[0].dtype, _HALF_SCALES)
    generator = torch.Generator().manual_seed(1234)

    def each(transform):
        return [transform(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t.clone()
                if isinstance(t, torch.Tensor) else t for t in inputs]

    def mixed(t):
        pick = torch.rand(t.shape, generator=generator).to(t.device) < 0.5
        return torch.where(pick, t * large, t * small).to(t.dtype)

    return [
        ("very large values", each(lambda t: t * large)),
        ("very small values", each(lambda t: t * small)),
        ("mixed scales", each(mixed)),
        ("all-equal values", each(lambda t: torch.full_like(t, 0.75))),
    ]


class Verifier:
    def __init__(self, problem, reference, model, device: str, timers: dict):
        self.problem, self.reference, self.model, self.device = problem, reference, model, device
        self.atol, self.rtol = getattr(problem, "ATOL", None), getattr(problem, "RTOL", None)
        self.timers = timers
        install_launch_counter()
        self.checks = 0

    def _candidate(self, inputs, where: str, guarded: bool = False):
        monitor = CandidateMonitor()
        threads_before = {t.ident for t in threading.enumerate()}
        launches_before = launch_count()
        with monitor:
            out = call(self.model, inputs, where)
        synchronize(self.device)
        if guarded:
            if launch_count() == launches_before:
                raise Failure(Status.REJECTED, "the candidate launched no Triton kernel: the computation must "
                                               "run in its own Triton kernels")
            if monitor.heavy:
                raise Failure(Status.REJECTED, f"the candidate calls PyTorch's {', '.join(monitor.heavy)}: the "
                                               "computation must run in its own Triton kernels")
            threads = extra_threads(threads_before)
            if threads:
                raise Failure(Status.REJECTED, f"the candidate left threads running: {', '.join(threads)}")
            tampered = timers_tampered(self.timers)
            if tampered:
                raise Failure(Status.REJECTED, f"the candidate replaced {', '.join(tampered)}")
        return out

    def check(self, inputs: list, where: str, guarded: bool = False) -> None:
        """Candidate, reference, candidate again, on the same inputs."""
        pristine = clone(inputs)
        first = self._candidate(inputs, where, guarded)
        if mismatch(pristine, inputs, 0.0, 0.0) is not None:
            raise Failure(Status.INCORRECT, f"{where}: the candidate modified its inputs in place")
        expected = call(self.reference, clone(pristine), "reference")
        synchronize(self.device)
        second = self._candidate(clone(pristine), where)
        for label, actual in (("", first), (" (second call)", second)):
            problem = mismatch(expected, actual, self.atol, self.rtol)
            if problem:
                raise Failure(Status.INCORRECT, f"{where}{label}: {problem}")
        if mismatch(first, second, 0.0, 0.0) is not None:
            raise Failure(Status.INCORRECT, f"{where}: two calls on the same inputs gave different outputs "
                                            "(the kernel is not deterministic)")
        self.checks += 1

    def run(self, shapes: list[dict], seeds: list[int]) -> int:
        """All stages; returns the number of checks passed."""
        smallest = shapes[0]
        inputs = make_inputs(self.problem, smallest, seeds[0], self.device)
        self.check(clone(inputs), f"smoke test, shape {smallest or 'default'}", guarded=True)
        for name, variant in adversarial_variants(inputs):
            self.check(variant, f"{name}, shape {smallest or 'default'}")
        for shape in shapes:
            for seed in seeds:
                if shape is smallest and seed == seeds[0]:
                    continue  # the smoke test covered it
                self.check(make_inputs(self.problem, shape, seed, self.device), f"shape {shape or 'default'}, seed {seed}")
        return self.checks

"""Staged correctness checks of a candidate against its reference (runs in the sandbox).

Cheapest first, stopping at the first failure:

1. smoke: the smallest shape, first seed, with the anti-cheat guards (the
   candidate must complete a Triton launch, dispatch no PyTorch operator but glue,
   leave no thread running and leave what the reference and the timer depend on
   as it was: ``evaluator.interpreter_state``);
2. adversarial values on the smallest shape: very large, very small, mixed
   scales, all-equal; where the candidate misses there, the reference is asked whether it is
   itself ill-conditioned on those values (:meth:`Verifier.reference_moves`): if so, that check
   holds the range only (no NaN, Inf or overflow the reference lacks);
3. every shape set (small to large, awkward sizes included) for every seed.

On any check, a candidate that misses the reference where the reference misses its own answer in
float64 (a sum that cancels) is judged against that answer instead (``evaluator.float64_arbiter``).

Every check calls the candidate, then the reference, then the candidate again,
with uninitialised allocations poisoned: both candidate outputs must match the
reference within tolerance, give the same values as each other, and leave the
inputs as they were.  Each call gets inputs of its own storage, made again from
the seed, and a check holds one input set and three outputs at a time (see
``evaluator.memory`` for what an evaluation may use).
"""
from __future__ import annotations

import threading
from typing import Callable

import torch

from evaluator.calls import Failure, call, call_candidate, clone, make_inputs, synchronize
from evaluator.compare import CHUNK, digest, finite_abs_max, mismatch
from evaluator.float64_arbiter import at_least_as_accurate, judged
from evaluator.guards import CandidateMonitor, call_violation, extra_threads, install_launch_counter
from evaluator.phases import Phases
from evaluator.result import Status

# Scales for the adversarial inputs: wide for fp32/fp64, kept in range for half types.
_SCALES = {torch.float32: (1e3, 1e-3), torch.float64: (1e3, 1e-3)}
_HALF_SCALES = (8.0, 1e-2)
Inputs = Callable[[], list]  # makes one input set, in fresh storage, the same values every call


def adversarial_variants(make: Inputs) -> list[tuple[str, Inputs, float]]:
    """Variants of the inputs ``make`` gives (very large, very small, mixed scales, all-equal values),
    each again a maker: a variant exists only while it is checked, and is made in place in the fresh
    inputs (a few GB of input must not become five times that).

    Each comes with the factor its absolute tolerance is scaled by.  These checks are about range
    (overflow, underflow, NaN, a max not subtracted), not precision, which the unit-scale checks hold:
    an fp32 result's rounding grows with the magnitude of the terms it sums, so two exact
    implementations of a convolution on inputs scaled by 1e3 differ by more than the unit-scale atol
    (cuDNN itself is 1.7-4.4 allowances off float64 there: experiments/kernelbench_seeds.md).  Scaled
    up by ``large``, the absolute tolerance is scaled by ``large`` too; the relative one is unchanged.
    """
    probe = make()
    floats = [t for t in probe if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not floats:
        return []
    large, small = _SCALES.get(floats[0].dtype, _HALF_SCALES)
    del probe, floats

    def mixed(t):
        return _times_noise(t, 1234, lambda u: torch.where(u < 0.5, large, small))

    return [
        ("very large values", _each(make, lambda t: t.mul_(large)), large),
        ("very small values", _each(make, lambda t: t.mul_(small)), 1.0),
        ("mixed scales", _each(make, mixed), large),
        ("all-equal values", _each(make, lambda t: t.fill_(0.75)), 1.0),
    ]


def _each(make: Inputs, transform) -> Inputs:
    """``make``'s inputs with ``transform`` applied in place to each floating tensor."""
    def variant():
        return [_in_place(t, transform) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                for t in make()]
    return variant


def _times_noise(t: torch.Tensor, seed: int, factor) -> torch.Tensor:
    """``t`` multiplied in place by ``factor(u)``, ``u`` uniform float32 noise: chunk by chunk from one
    seeded stream, so the same values on every call and small temporaries (a non-contiguous ``t``
    comes back contiguous, its copy)."""
    generator = torch.Generator(device=t.device).manual_seed(seed)
    flat = t.view(-1) if t.is_contiguous() else t.contiguous().view(-1)
    for chunk in flat.split(CHUNK):
        noise = torch.rand(chunk.shape, generator=generator, device=t.device, dtype=torch.float32)
        chunk.mul_(factor(noise).to(t.dtype))
    return flat.view(t.shape)


# How far the reference's inputs are moved to ask whether it is ill-conditioned: a few units in
# the last place, less than a backward-stable sum of n terms is allowed (about n of them).
_PERTURB_ULPS = 4


def perturbed(make: Inputs) -> Inputs:
    """``make``'s inputs with each floating element moved by up to ``_PERTURB_ULPS`` units in the last
    place, the same moves on every call."""
    def move(t):
        eps = torch.finfo(t.dtype).eps * _PERTURB_ULPS
        return _times_noise(t, 4321, lambda u: 1.0 + eps * (2.0 * u - 1.0))
    return _each(make, move)


def _against(expected, output, atol, rtol, atol_scale: float, bound: float | None) -> str | None:
    """``mismatch`` within the tolerance, or within the range ``bound`` (no NaN or Inf the reference
    lacks, no value further than ``bound`` from the reference's) where it is set."""
    if bound is None:
        return mismatch(expected, output, atol, rtol, atol_scale)
    found = mismatch(expected, output, bound, 0.0, 1.0)
    return found and f"beyond the reference's range: {found}"


def _in_place(t: torch.Tensor, transform) -> torch.Tensor:
    """``transform`` applied in place, to a copy of its layout where ``t`` is not contiguous (an
    expanded tensor shares memory across elements)."""
    return transform(t if t.is_contiguous() else t.clone(memory_format=torch.preserve_format))


class Verifier:
    """Runs the staged checks; holds at most one input set and three outputs of a shape at a time
    (inputs, the reference's output, one of the candidate's), so that a check needs little more
    memory than the reference itself."""

    def __init__(self, problem, reference, invoker, device: str, watch=None, tolerance: float | None = None):
        """``invoker`` calls the candidate (``evaluator.invoke``); ``watch``: what the reference and the
        timer depend on, compared after the smoke test (``evaluator.interpreter_state.StateWatch``);
        ``tolerance``: atol and rtol where the task sets no ATOL/RTOL (None: per-dtype defaults)."""
        self.problem, self.reference, self.invoker, self.device = problem, reference, invoker, device
        self.atol, self.rtol = getattr(problem, "ATOL", tolerance), getattr(problem, "RTOL", tolerance)
        self.watch = watch
        install_launch_counter()
        self.checks = 0
        self.phases = Phases()  # seconds per stage: smoke_s, adversarial_s, shapes_s
        self.repeatable_inputs = True  # get_inputs gives the same values for the same seed (see run)
        self.range_only: list[str] = []  # adversarial checks that held the range only (see check)
        self.judged_by_float64: list[str] = []  # checks judged against the float64 answer (see check)

    def _candidate(self, inputs, where: str, guarded: bool = False):
        monitor = CandidateMonitor()
        threads_before = {t.ident for t in threading.enumerate()}
        outcome = call_candidate(self.invoker, inputs, where, monitor)
        synchronize(self.device)
        if guarded:
            violation = call_violation(monitor, outcome.launched, outcome.attempted)
            if violation:
                raise Failure(Status.REJECTED, violation)
            threads = extra_threads(threads_before)
            if threads:
                raise Failure(Status.REJECTED, f"the candidate left threads running: {', '.join(threads)}")
            if self.watch is not None:
                self.watch.check("after its first call")
        return outcome.output

    def check(self, make: Inputs, where: str, guarded: bool = False, atol_scale: float = 1.0,
              range_if_ill_conditioned: bool = False) -> None:
        """Candidate, reference, candidate again, on the same values; each call on inputs of its own
        storage, so an output remembered by the identity of its inputs gains nothing.
        ``range_if_ill_conditioned`` (adversarial values): where the candidate misses and the
        reference itself moves beyond the tolerance when its inputs move by a rounding error, the
        values cannot be held to the tolerance (attention on logits of 1e6: which key wins is
        decided by rounding); the check then holds the range: NaN and Inf only where the reference
        has them, and no value further from the reference's than twice its largest.  Before that, on
        any check, where the candidate misses and the reference itself misses its own answer in
        float64, the candidate is judged against that answer: kept if at least as accurate as the
        reference (``evaluator.float64_arbiter``)."""
        inputs = make()
        pristine = digest(inputs) if self.repeatable_inputs else None
        saved = None if self.repeatable_inputs else clone(inputs)
        first = self._candidate(inputs, where, guarded)
        if digest(inputs) != (pristine if saved is None else digest(saved)):
            raise Failure(Status.INCORRECT, f"{where}: the candidate modified its inputs in place")
        first_digest = digest(first, canonical=True)
        expected = call(self.reference, inputs, "reference")
        synchronize(self.device)
        del inputs

        bound, exact = None, None  # set where only the range is held; the float64 answer where it judges
        problem = _against(expected, first, self.atol, self.rtol, atol_scale, bound)
        if problem and saved is None:  # the reference's own rounding may be what the candidate misses
            note, exact = judged(expected, first, self.reference, make, self.device, self.atol, self.rtol,
                                 atol_scale)
            if note:
                problem = None
                self.judged_by_float64.append(f"{where.split(',')[0]}: {note}")
        if problem and range_if_ill_conditioned and saved is None and self.reference_moves(make, expected, atol_scale):
            bound = 2.0 * finite_abs_max(expected)
            problem = _against(expected, first, self.atol, self.rtol, atol_scale, bound)
            if not problem:
                self.range_only.append(where.split(",")[0])
        if problem:
            raise Failure(Status.INCORRECT, f"{where}: {problem}")
        del first
        again = make() if saved is None else clone(saved)
        if pristine is not None and digest(again) != pristine:
            # get_inputs draws from a generator the seeding does not reach, and the probe's two draws
            # matched by chance (a byte of entropy matches 1 time in 256): copy from now on, and check again
            self.repeatable_inputs = False
            del again, expected
            return self.check(make, where, guarded, atol_scale, range_if_ill_conditioned)
        second = self._candidate(again, where)
        del again
        problem = _against(expected, second, self.atol, self.rtol, atol_scale, bound)
        if problem and exact is not None and at_least_as_accurate(exact, expected, second, self.atol, self.rtol,
                                                                  atol_scale):
            problem = None
        if problem:
            raise Failure(Status.INCORRECT, f"{where} (second call): {problem}")
        if digest(second, canonical=True) != first_digest:
            raise Failure(Status.INCORRECT, f"{where}: two calls on the same inputs gave different outputs "
                                            "(the kernel is not deterministic)")
        self.checks += 1

    def held(self) -> dict:
        """For the result's extra: the checks that held the range only, and those judged in float64."""
        return {key: names for key, names in (("range_only", self.range_only),
                                             ("judged_by_float64", self.judged_by_float64)) if names}

    def range_note(self) -> str:
        """The reason's words on the checks that held the range only ("" where none did)."""
        if not self.range_only:
            return ""
        return f" ({', '.join(self.range_only)}: the range only, the reference itself ill-conditioned there)"

    def float64_note(self) -> str:
        """The reason's words on the checks judged against float64 ("" where none was)."""
        if not self.judged_by_float64:
            return ""
        return (f"; {len(self.judged_by_float64)} judged against float64, where the reference itself misses it "
                f"(evaluator.float64_arbiter): {self.judged_by_float64[0]}")

    def reference_moves(self, make: Inputs, expected, atol_scale: float) -> bool:
        """Whether the reference's output moves beyond the tolerance when each input moves by a few
        units in the last place (``perturbed``): the reference is ill-conditioned on these values."""
        output = call(self.reference, perturbed(make)(), "reference")
        synchronize(self.device)
        return mismatch(expected, output, self.atol, self.rtol, atol_scale) is not None

    def run(self, shapes: list[dict], seeds: list[int]) -> int:
        """All stages; returns the number of checks passed."""
        smallest = shapes[0]

        def maker(shape, seed) -> Inputs:
            return lambda: make_inputs(self.problem, shape, seed, self.device)

        # Inputs made again give the same values (seeded) in new storage, unless get_inputs draws from
        # a generator the seeding does not reach: then each check keeps a copy instead.
        with self.phases.timed("smoke_s"):  # the candidate's first launch: its JIT compile is here
            self.repeatable_inputs = digest(maker(smallest, seeds[0])()) == digest(maker(smallest, seeds[0])())
            self.check(maker(smallest, seeds[0]), f"smoke test, shape {smallest or 'default'}", guarded=True)
        with self.phases.timed("adversarial_s"):
            for name, variant, atol_scale in adversarial_variants(maker(smallest, seeds[0])):
                self.check(variant, f"{name}, shape {smallest or 'default'}", atol_scale=atol_scale,
                           range_if_ill_conditioned=True)
        with self.phases.timed("shapes_s"):
            for shape in shapes:
                for seed in seeds:
                    if shape is smallest and seed == seeds[0]:
                        continue  # the smoke test covered it
                    self.check(maker(shape, seed), f"shape {shape or 'default'}, seed {seed}")
        return self.checks

"""What was timed is held to the checks' rules (runs in the sandbox).

The checks (``evaluator.correctness``) call the candidate a few dozen times; timing calls it
hundreds more.  A candidate that behaves only while checked (its own kernels for the first calls,
PyTorch after them; an output remembered from an earlier call; an unwritten buffer whenever no
check seems to look) would be scored on calls nobody checked.  So the timed calls are checked too,
and nothing at call time tells a checked one from the others:

- every call is made the same way (``evaluator.invoke``: one thread, the same frames, no dispatch
  mode, no profiler);
- they rotate over several input sets of distinct storage and values (:func:`input_sets`), made
  before timing, so an output remembered by identity, pointer or shape is wrong or gains nothing;
  the sets' digests are compared after timing (a candidate that alters its inputs shows);
- every call's completed Triton launches are counted (:class:`TimedCalls`): a call that launches
  fewer than the checked calls of its input set (or none) is rejected, with the call numbers;
- which calls' outputs are checked is drawn after each call has returned, from the operating
  system's randomness (a reservoir of ``keep`` calls, uniform over the whole sequence): a copy of a
  drawn output is queued behind the call's closing event, and compared with the reference's after
  timing (:func:`check_kept`).  A cheat that moves the median must cheat on more than half of the
  calls, so each kept call catches it with odds above one half;
- the round of calls after the last timed one is checked against the reference, each output
  against the reference's for its set (:func:`check_outputs`), once the caller's stream alone is
  synchronised;
- one batch of calls after those is audited (:func:`audit`): each under the dispatch monitor
  (PyTorch may only allocate, view, copy and cast around the candidate's kernels) and, on a GPU,
  under ``torch.profiler``: at least ``triton_share_min`` of its device time must be in the
  candidate's own Triton kernels, on the caller's stream, and the timed calls' median at least a
  quarter of the device time an audited call took (:func:`as_busy_unwatched`: a candidate that does
  less when not watched);
- the sets' values are drawn afresh between timed calls (``evaluator.fresh_inputs``).
"""
from __future__ import annotations

import secrets
import weakref
from dataclasses import dataclass, field

import torch

from evaluator.calls import Failure, call, call_candidate, clone, make_inputs
from evaluator.compare import PLAIN_TENSORS, digest, flatten, nbytes
from evaluator.float64_arbiter import judged_mismatch
from evaluator.guards import CandidateMonitor, argument_bytes, call_violation
from evaluator.kernel_profile import aggregate
from evaluator.result import Status
from evaluator.spent_outputs import poison, spared_storages, storage_of
from evaluator.timing import spin_rate

MB = 1 << 20
SET_SEED_STEP = 7919  # input set k of a timing is made from its seed plus k times this


def _bytes(values) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def input_sets(problem, shape: dict, seed: int, device: str, timing: dict, first: list) -> list[list]:
    """``first`` and more input sets of the shape, seeded apart: ``timing["input_sets"]`` in all, or 2
    where the extra sets would hold more than ``timing["input_sets_mb"]``."""
    wanted = int(timing.get("input_sets", 1))
    budget = float(timing.get("input_sets_mb", float("inf"))) * MB
    if wanted > 2 and (wanted - 1) * _bytes(first) > budget:
        wanted = 2
    return [first, *(make_inputs(problem, shape, seed + SET_SEED_STEP * k, device) for k in range(1, wanted))]


def in_turn(model, sets: list[list], stage: str):
    """``model`` called on the input sets in turn.  Every timed callable is called once per
    round, so candidate and baselines of one round see the same set."""
    turn = iter(range(1 << 62))
    return lambda: call(model, sets[next(turn) % len(sets)], stage)


@dataclass
class TimedCalls:
    """The candidate as timing calls it: the input sets in turn (as :func:`in_turn`), every call
    through ``invoker``, its completed launches recorded.  ``keep``: how many calls' outputs are kept
    for :func:`check_kept`, drawn after each call (in :meth:`after`); ``every``: every call's output
    kept, to be checked at the end of its batch (a re-verification)."""

    invoker: object
    sets: list[list]
    device: str
    keep: int = 0
    keep_bytes: float = float("inf")  # at most this much held in kept copies (at least one copy)
    every: bool = False
    keep_inputs: bool = False  # a reference that works in place changes the sets: a kept call keeps its inputs
    calls: int = 0
    launches: list[int] = field(default_factory=list)  # per call, completed launches
    kept: list[tuple] = field(default_factory=list)  # (call number, copy of its output, of its inputs or None)
    checked: list[int] = field(default_factory=list)  # numbers of the calls whose outputs were compared
    mode: object = None  # the dispatch mode of an audit's calls
    last_attempted: int = 0  # launches tried by the last call, failed ones included
    fresh: object = None  # evaluator.fresh_inputs.FreshInputs: the set a call takes drawn afresh before it
    _last: tuple | None = None
    _saved: tuple | None = None  # (call number, its inputs' copy), made by before() outside its window
    _earlier: list = field(default_factory=list)  # weak references to earlier calls' outputs

    def __post_init__(self):
        # an input returned as it is (a kernel working in place) is the harness's, not remembered
        self._inputs = spared_storages(self.sets)

    def _copies_inputs(self) -> bool:
        # (an audited call is never kept: no copy of its inputs in the profile)
        return self.keep_inputs and bool(self.keep or self.every) and self.mode is None

    def before(self) -> None:
        """Before the next call's window opens: the set it takes made again from a new seed (drawn
        afresh), and where the reference works in place, the copy of its inputs the checks compare on
        (made inside the window, it timed against the candidate)."""
        if self.fresh is not None:
            # Here, not after the call before: the candidate is the first to see these values, so
            # nothing a baseline timed just before it left in memory (its output, its intermediates)
            # is the answer (evaluator.spent_outputs).
            self.fresh.refresh(self.calls % len(self.sets))
        if self._copies_inputs():
            self._saved = (self.calls, clone(self.sets[self.calls % len(self.sets)]))

    def __call__(self):
        number, inputs = self.calls, self.sets[self.calls % len(self.sets)]
        self.calls += 1
        saved = None
        if self._copies_inputs():
            prepared, self._saved = self._saved, None
            saved = prepared[1] if prepared is not None and prepared[0] == number else clone(inputs)
        if saved is None and self.fresh is not None:  # its values' seed: the checks make them again
            saved = self.fresh.seeds[number % len(self.sets)]
        outcome = call_candidate(self.invoker, inputs, f"timed call {number + 1}", self.mode)
        self._made_anew(number, outcome.output)
        self.launches.append(outcome.launched)
        self.last_attempted = outcome.attempted
        self._last = (number, outcome.output, saved)
        return outcome.output

    def _made_anew(self, number: int, output) -> None:
        """Each call's outputs plain tensors in storage of their own: not a subclass (whose values could be
        computed when read, outside the window), nor the storage of an earlier call's output still alive.
        The harness holds no output past its call (kept ones are copies), so one alive is held by the
        candidate: remembered for the same inputs, the work left out of every call after the first
        (the input sets are used in turn), or a buffer each call overwrites under the caller's feet."""
        tensors = [t for t in flatten(output) if isinstance(t, torch.Tensor)]
        for t in tensors:
            if type(t) not in PLAIN_TENSORS:
                raise Failure(Status.REJECTED, f"timed call {number + 1} returned a tensor subclass "
                                               f"{type(t).__name__}: outputs must be plain tensors")
        alive = [t for t in (ref() for ref in self._earlier) if t is not None]
        held = {storage_of(t) for t in alive} - self._inputs - {0}
        if any(storage_of(t) in held for t in tensors):
            raise Failure(Status.REJECTED, f"timed call {number + 1} returned an output in the storage of an "
                                           "earlier call's output, which the candidate still holds: each call "
                                           "must make its outputs anew (a remembered output times no work)")
        self._earlier = [weakref.ref(t) for t in alive + tensors]

    def after(self) -> None:
        """After the last call's window has closed: whether its output is kept is drawn now."""
        if self._last is None:
            return
        number, out, saved = self._last
        self._last = None
        if number == 0 and self.keep:  # the reservoir's size, once an output's size is known
            size = nbytes(out)
            if size and self.keep_bytes < float("inf"):
                self.keep = max(1, min(self.keep, int(self.keep_bytes // size)))
        if self.every or len(self.kept) < self.keep:
            self.kept.append((number, clone(out), saved))
        elif self.keep and secrets.randbelow(number + 1) < self.keep:  # a reservoir over every call so far
            self.kept[secrets.randbelow(self.keep)] = (number, clone(out), saved)
        poison(out, self._inputs)  # what it wrote, gone from the memory the next call may get (spent_outputs)

    def set_of(self, number: int) -> int:
        return number % len(self.sets)


def stream_synchronize(device: str) -> None:
    """The caller's stream only: work the candidate left on another stream is not waited for."""
    if device.startswith("cuda"):
        torch.cuda.current_stream().synchronize()


def check_kept(timed: TimedCalls, reference, atol, rtol) -> int:
    """The kept outputs against the reference's for their input sets (one reference output held at a
    time); the kept copies dropped.  Returns how many were checked."""
    stream_synchronize(timed.device)
    kept, timed.kept = sorted(timed.kept, key=lambda k: (timed.set_of(k[0]), k[0])), []
    expected, expected_set = None, None
    for number, out, saved in kept:
        which = timed.set_of(number)
        if isinstance(saved, int):  # drawn afresh: the values it took, made again from their seed
            saved = timed.fresh.make(saved)
        if saved is not None:  # the inputs as they were at the call (a reference that works in place)
            expected, expected_set = call(reference, saved, "reference"), None
        elif which != expected_set:
            expected, expected_set = None, which
            expected = call(reference, timed.sets[which], "reference")
        problem = judged_mismatch(expected, out, reference, timed.sets[which] if saved is None else saved,
                                  timed.device, atol, rtol)
        if problem:
            raise Failure(Status.INCORRECT, f"timed call {number + 1} (input set {which + 1} of {len(timed.sets)}, "
                                            f"drawn for checking after it returned): {problem}")
        timed.checked.append(number)
    return len(kept)


def check_outputs(timed: TimedCalls, reference, atol, rtol) -> int:
    """One more round of the timed sequence, each call's output checked against the reference's
    for its input set.

    The calls go on from the last timed one, on the same input sets in the same turn: to the
    candidate they are timed calls like the others.  Each output is checked as soon as the caller's
    stream alone is synchronised, then dropped, so no more than one is held at a time.
    Returns how many were checked.
    """
    for _ in timed.sets:
        number = timed.calls
        which = timed.set_of(number)
        out = timed()
        timed._last = None
        stream_synchronize(timed.device)
        expected = call(reference, timed.sets[which], "reference")
        problem = judged_mismatch(expected, out, reference, timed.sets[which], timed.device, atol, rtol)
        if problem:
            raise Failure(Status.INCORRECT, f"timed calls, input set {which + 1} of {len(timed.sets)} "
                                            f"(call {number + 1}): {problem}")
        timed.checked.append(number)
        del out, expected
    return len(timed.sets)


def check_launches(timed: TimedCalls) -> dict:
    """Every call launched at least one Triton kernel, and as many as the checked calls of its input set
    (those whose outputs were compared so far); ``{"launches": [fewest, most]}`` per call, else rejected."""
    n = len(timed.sets)
    checked = sorted(set(timed.checked))
    every_set = [timed.launches[c] for c in checked]
    drawn_afresh = timed.fresh is not None  # a set's values change call to call: so may a launch count
    for which in range(n):
        mine = [] if drawn_afresh else [timed.launches[c] for c in checked if c % n == which]
        floor = max(1, min(mine or every_set, default=1))
        short = [c + 1 for c in range(which, len(timed.launches), n) if timed.launches[c] < floor]
        if not short:
            continue
        shown = ", ".join(map(str, short[:8])) + (f" and {len(short) - 8} more" if len(short) > 8 else "")
        fewest = min(timed.launches[c - 1] for c in short)
        if fewest == 0:
            why = "launched no Triton kernel"
        else:
            why = f"launched {fewest} Triton kernel(s), fewer than the {floor} of the checked calls of their input set"
        raise Failure(Status.REJECTED, f"timed calls {shown} (input set {which + 1} of {n}) {why}: the work must run "
                                       "in the candidate's own kernels on every call")
    return {"launches": [min(timed.launches, default=0), max(timed.launches, default=0)]}


def inputs_unchanged(timed: TimedCalls, digests: list) -> None:
    """The input sets hold what they held before timing (their digests, taken when made)."""
    for which, (inputs, before) in enumerate(zip(timed.sets, digests)):
        if digest(inputs) != before:
            raise Failure(Status.INCORRECT, f"the candidate modified timed input set {which + 1} of "
                                            f"{len(timed.sets)} in place")


def audit(timed: TimedCalls, calls: int, kernel_names: set[str], minimum: float,
          lead_ms: float = 20.0) -> dict:
    """``calls`` more calls, each under the dispatch monitor (its aten operators recorded, nothing
    poisoned) and, on a GPU with kernels known, all under ``torch.profiler``: reject any that
    dispatches work to PyTorch or completes no launch, and unless ``minimum`` of the device time is
    the candidate's Triton kernels on the caller's stream.  Returns what was verified."""
    verified: dict = {"audited_calls": calls}
    profiled = timed.device.startswith("cuda") and kernel_names

    def run() -> None:
        for _ in range(calls):
            timed.mode = monitor = CandidateMonitor(poison=False)
            try:
                timed()
            finally:
                timed.mode, timed._last = None, None
            violation = call_violation(monitor, timed.launches[-1], timed.last_attempted)
            if violation:
                raise Failure(Status.REJECTED, f"timed call {timed.calls} (audited): {violation}")

    if not profiled:
        run()
        return verified
    from torch.profiler import ProfilerActivity, profile

    lead = max(1000, int(lead_ms * spin_rate()))  # measured (once a process) before the profiler starts
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, argument_bytes() as moved:
        # the marker, PyTorch's spin_kernel on the caller's stream, held while the host queues the calls:
        # the GPU then runs them back to back, at its clocks again (as_busy_unwatched compares)
        torch.cuda._sleep(lead)
        run()
        torch.cuda.synchronize()
    kernels = [(e.name, e.device_resource_id, e.time_range.elapsed_us()) for e in prof.events()
               if getattr(getattr(e, "device_type", None), "name", "") == "CUDA"]
    marker = next((k for k in kernels if "spin_kernel" in k[0]), None)
    if marker is not None:
        kernels.remove(marker)
    share = device_share(kernels, kernel_names, marker[1] if marker else None)
    if share.elsewhere:
        raise Failure(Status.REJECTED, f"the candidate's kernels {', '.join(sorted(share.elsewhere))} ran on "
                                       "another CUDA stream than the caller's: timed work must run on the "
                                       "caller's stream")
    if share.share < minimum:
        raise Failure(Status.REJECTED,
                      f"only {share.share:.0%} of the device time of {calls} timed calls is in the candidate's "
                      f"own Triton kernels (at least {minimum:.0%} needed); the rest: {share.top_others()}")
    caller = marker[1] if marker else None
    on_caller = sum(us for _, stream, us in kernels if caller is None or stream == caller)
    verified.update(triton_share=round(share.share, 4), profiled_calls=calls, stream_checked=marker is not None,
                    audited_call_ms=round(on_caller / calls / 1e3, 6))
    # Where the device time went, by kernel: for the LLM's prompt (evaluator.kernel_profile), taken out
    # of what was verified by the caller, which knows the work and the peaks.
    verified["device_times"] = {"times": aggregate(kernels), "own": sorted(kernel_names), "argument_bytes": moved}
    return verified


# A timed call's median may fall this far below the device time an audited call took, and no further:
# a margin for clocks and caches, so a candidate doing less when not watched gains at most 2x unseen.
# 76 honest KernelBench seeds on an H200 ran their timed median at 0.86-1.12x of that device time
# (kernelbench_search.md section 33).
UNWATCHED_MIN = 0.5


def busy_unwatched(timed_ms: float, verified: dict | None) -> bool:
    audited = (verified or {}).get("audited_call_ms")
    return not audited or timed_ms >= UNWATCHED_MIN * audited


def as_busy_unwatched(timed_ms: float, verified: dict | None) -> None:
    """The timed calls' median against the device time of an audited call (on a GPU, where the audit
    profiles).  A timed call's window spans its kernels on the one stream and more, and the audited
    calls run warm (no cache flushed between them), so an honest candidate's median is about that
    device time or above it; one that does less when no dispatch mode or profiler is on than when one
    is falls below it, by as much as it gains."""
    if not busy_unwatched(timed_ms, verified):
        audited = verified["audited_call_ms"]
        raise Failure(Status.REJECTED, f"the timed calls took {timed_ms:.4g} ms (median), {timed_ms / audited:.2f} of "
                                       f"the {audited:.4g} ms of device time an audited call took (at least "
                                       f"{UNWATCHED_MIN:.2f} needed): a candidate must do the same work whether or "
                                       "not a dispatch mode or the profiler is on")


@dataclass
class DeviceShare:
    share: float  # of the device time, in the candidate's kernels on the caller's stream
    others: dict[str, float]  # device time (us) of everything else, by kernel (or memcpy/memset) name
    elsewhere: set[str]  # the candidate's kernels seen on another stream

    def top_others(self, n: int = 3) -> str:
        top = sorted(self.others.items(), key=lambda kv: -kv[1])[:n]
        return "; ".join(f"{name[:80]} ({us:.0f} us)" for name, us in top) or "none"


def device_share(kernels: list[tuple[str, int, float]], kernel_names: set[str], caller: int | None) -> DeviceShare:
    """``kernels``: (name, stream, microseconds) of each device activity; ``caller``: the caller's stream
    (None: any).  Memcpy and memset (glue's copies and fills) count as not the candidate's."""
    own, others, elsewhere = 0.0, {}, set()
    for name, stream, us in kernels:
        ours = name in kernel_names
        if ours and (caller is None or stream == caller):
            own += us
            continue
        others[name] = others.get(name, 0.0) + us
        if ours:
            elsewhere.add(name)
    total = own + sum(others.values())
    return DeviceShare(own / total if total > 0 else 0.0, others, elsewhere)

"""Timed calls' input values drawn afresh between calls (runs in the sandbox).

The timed calls take a few input sets in turn (``evaluator.timed_checks.input_sets``).  Held to the
same values, a set lets a candidate remember its output by a sample of those values and copy it
into a new tensor on every later call: the copy is all that is timed, and every check passes.  So
before each of the candidate's calls, before its window opens, the set it takes is made again from
a seed drawn from the operating system's randomness (the task's own ``get_inputs``, so its values
keep their distribution and structure) and copied into the set's own storage.  No timed call then
sees values an earlier call saw, and the candidate is the first to see them: a baseline timed just
before it in the same round ran on the set's older values, so nothing it left in memory (its
output, its intermediates) is the answer.  A kept call keeps its seed, and the checks make its
values again from it for the reference.

Not drawn afresh (the values stay as they are): a set of more than ``limit_bytes``, or more than
``room_bytes`` (the device's free memory: the new values are made beside the set, then copied into
it), sets that share storage (a buffer ``get_inputs`` fills again), a task whose
``get_inputs`` gives other shapes, dtypes or plain values for another seed, or inputs neither tensors
nor plain values, and, from then on, one whose ``get_inputs`` is slow on the host: the median of its
draws past the first more than ``limit_s``, or one of them more than ``FRESH_HOST_CAP_S``.  One draw a
little slow (the process preempted on a busy host, a garbage collection, the allocator asking the
driver for memory) costs no check: the timer times a batch the host was late for again, behind a
longer spin (``evaluator.timing.host_late``).
"""
from __future__ import annotations

import secrets
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from evaluator.compare import digest, flatten, nbytes
from evaluator.memory import MB
from evaluator.spent_outputs import poison, storage_of


# On a GPU a set is made again between two calls of a batch the timer queues behind one spin: a
# get_inputs slower than this as a rule would leave the GPU waiting for the host inside the next call's
# window, batch after batch.  The cap: longer than the longest spin the timer puts ahead of a batch
# (evaluator.timing.next_lead's cap), so no batch rerun could cover it.
FRESH_HOST_LIMIT_S = 0.005
FRESH_HOST_CAP_S = 0.1
FIRST_HOST_LIMIT_S = 1.0
SLOW_MEDIAN_AFTER = 5  # draws past the first before their median can stop the next ones


@dataclass
class FreshInputs:
    make: Callable[[int], list]  # an input set of the timed shape, from a seed
    sets: list[list]  # the timed input sets, refreshed in place
    seeds: list[int]  # per set, the seed of the values it holds (those it was made from, to start)
    limit_bytes: float = float("inf")
    room_bytes: float = float("inf")
    limit_s: float = float("inf")  # FRESH_HOST_LIMIT_S on a GPU
    refreshed: list[bool] = field(default_factory=list)
    made: int = 0  # sets made again so far
    host_s: list[float] = field(default_factory=list)  # the host's time of each draw past the first
    slow_draws: int = 0  # of those, the ones past limit_s
    off: str = ""  # why no set is drawn afresh (any longer), if so

    def __post_init__(self):
        self.refreshed = [False] * len(self.sets)
        largest = max((nbytes(s) for s in self.sets), default=0)
        if largest > self.limit_bytes:
            self.off = f"an input set of {largest / MB:.0f} MB, more than timing.fresh_inputs_mb"
        elif largest > self.room_bytes:
            self.off = f"no room on the device to make an input set of {largest / MB:.0f} MB again beside it"
        elif _shared(self.sets):  # a buffer get_inputs fills again: one set's seed would not say its values
            self.off = "the input sets share storage"

    def refresh(self, which: int) -> None:
        """Set ``which`` made again from a new seed, in its own storage."""
        if self.off:
            return
        seed = secrets.randbits(31)
        held = flatten(self.sets[which])
        began = time.perf_counter()
        try:
            fresh = flatten(self.make(seed))
        except Exception as exc:  # noqa: BLE001 (the task's get_inputs: the set then stays as it is)
            self.off = f"get_inputs failed for another seed: {type(exc).__name__}: {exc}"[:300]
            return
        why = _unlike(held, fresh) or ("get_inputs gave storage of the sets' own" if _shared([*self.sets, fresh])
                                       else "")
        if why:
            self.off = why
            return
        with torch.no_grad():  # an input that requires grad is written all the same
            for old, new in zip(held, fresh):
                if isinstance(old, torch.Tensor):
                    old.copy_(new)
        # The values made beside the set are freed just before the candidate's call: poisoned, or the
        # allocator would hand their memory, holding its inputs, to the output it asks for.
        poison(fresh, set())
        self.seeds[which], self.refreshed[which] = seed, True
        took = time.perf_counter() - began
        self.made += 1
        why = self._slow(took)
        if why:  # it stands as made, and stops the next ones
            self.off = f"get_inputs took {why} of the host's time"

    def _slow(self, took: float) -> str:
        """Why draws are too slow to go on (empty where they are not), ``took`` the last one's time.
        The first pays for first uses (a block of gigabytes allocated on the GPU), not a get_inputs
        on the CPU: it is held to FIRST_HOST_LIMIT_S alone."""
        if self.made == 1:
            limit = max(self.limit_s, FIRST_HOST_LIMIT_S)
            return f"{took * 1e3:.1f} ms, more than {limit * 1e3:g} ms" if took > limit else ""
        self.host_s.append(took)
        cap = max(self.limit_s, FRESH_HOST_CAP_S)
        if took > cap:
            return f"{took * 1e3:.1f} ms in one draw, more than {cap * 1e3:g} ms"
        self.slow_draws += took > self.limit_s
        # the median past the limit: more than half of them (counted, not sorted on every call)
        if len(self.host_s) >= SLOW_MEDIAN_AFTER and 2 * self.slow_draws > len(self.host_s):
            median = statistics.median(self.host_s)
            return f"a median {median * 1e3:.1f} ms a draw, more than {self.limit_s * 1e3:g} ms"
        return ""

    def host_ms(self) -> list[float]:
        """The host's time of the draws past the first, ms: [median, most] (empty before any)."""
        if not self.host_s:
            return []
        return [round(statistics.median(self.host_s) * 1e3, 3), round(max(self.host_s) * 1e3, 3)]

    def digests(self, before: list) -> list:
        """What each set should hold now: its digest before timing where never refreshed, else that of
        its values made again from its last seed."""
        return [digest(self.make(s)) if r else b for b, s, r in zip(before, self.seeds, self.refreshed)]


def _unlike(held: list, fresh: list) -> str:
    """Why values made from another seed cannot stand in for ``held`` (empty where they can)."""
    if len(held) != len(fresh):
        return "get_inputs gave another number of inputs for another seed"
    for old, new in zip(held, fresh):
        if isinstance(old, torch.Tensor) != isinstance(new, torch.Tensor):
            return "get_inputs gave other kinds of inputs for another seed"
        if not isinstance(old, torch.Tensor):
            if not isinstance(old, _PLAIN):  # a dict or an object: it could hold tensors not written
                return f"get_inputs gave an input of type {type(old).__name__}, neither a tensor nor a plain value"
            if repr(old) != repr(new):
                return "get_inputs gave other plain values for another seed"
            continue
        if old.shape != new.shape or old.dtype != new.dtype or old.device != new.device:
            return "get_inputs gave other shapes or dtypes for another seed"
        if not _writable_in_place(old):
            return "an input whose elements share memory (expanded) cannot be written in place"
    return ""


_PLAIN = (int, float, bool, complex, str, bytes, type(None), torch.dtype, torch.device)


def _shared(sets: list) -> bool:
    """Whether two of ``sets`` (each a list of inputs) hold tensors in one storage."""
    owner: dict[int, int] = {}
    for k, values in enumerate(sets):
        for t in flatten(values):
            where = storage_of(t) if isinstance(t, torch.Tensor) else 0
            if where and owner.setdefault(where, k) != k:
                return True
    return False


def _writable_in_place(t: torch.Tensor) -> bool:
    return t.is_contiguous() or torch._debug_has_internal_overlap(t) == 0

"""Timed calls' outputs poisoned once their windows have closed (runs in the sandbox).

Every timed callable (the candidate, the reference, a live torch.compile baseline) frees its output
after its call, and the allocator hands that memory to the next call that asks for as much: on a
GPU, the caching allocator gives it back at once, on the same stream.  The reference timed just
before the candidate on the same input set (every other round: the rounds alternate who goes first)
would so leave the right answer (where the set holds the same values) in the buffer a candidate
gets from ``torch.empty_like``: a kernel that writes nothing would be right on those calls, and
timed at nothing (the exploit KernelBench harnesses were caught by).  So each output's storage is filled with 0xFF bytes (NaN for floats, -1
for integers) after its window, before it is freed; the checks of the timed calls then find NaN
where a call wrote nothing.

Spared: storage of the input sets (a kernel working in place returns its input) and of the
reference's own tensors (its parameters, buffers and tensor attributes: an output that is one of
them is the model's state).  What the reference frees inside its call (intermediates) is not
reached here; where the inputs are drawn afresh (``evaluator.fresh_inputs``) the candidate is the
first to see each set's values, and nothing any baseline left is an answer to them.
"""
from __future__ import annotations

import torch

from evaluator.compare import flatten


def storage_of(t: torch.Tensor) -> int:
    """Where ``t``'s storage starts (0 for none: an empty tensor's, or a layout without one, as sparse)."""
    try:
        storage = t.untyped_storage()
    except (NotImplementedError, RuntimeError):
        return 0
    return storage.data_ptr() if storage.nbytes() else 0


def poison(value, spared: set[int]) -> None:
    """Fill the storage of each tensor in ``value`` with 0xFF bytes, but storages in ``spared``."""
    seen = set(spared)
    for t in flatten(value):
        if isinstance(t, torch.Tensor):
            where = storage_of(t)
            if where and where not in seen:
                seen.add(where)
                t.untyped_storage().fill_(0xFF)  # queued on the caller's stream, behind the call


def spared_storages(sets: list[list], module=None) -> set[int]:
    """Storage of every tensor in the input sets and, given a module, of its parameters, buffers and
    tensor attributes (its submodules' too)."""
    tensors = [t for values in sets for t in flatten(values) if isinstance(t, torch.Tensor)]
    if isinstance(module, torch.nn.Module):
        for part in module.modules():
            tensors += [*part.parameters(recurse=False), *part.buffers(recurse=False)]
            tensors += [v for v in vars(part).values() if isinstance(v, torch.Tensor)]
    return {storage_of(t) for t in tensors} - {0}


class PoisonedAfter:
    """A baseline as timed: its output held past its call, and poisoned by :meth:`after` once the
    call's window has closed (the timer's ``after`` hook)."""

    def __init__(self, call, spared: set[int]):
        self.call, self.spared, self.last = call, spared, None

    def __call__(self):
        self.last = self.call()
        return self.last

    def after(self) -> None:
        last, self.last = self.last, None
        poison(last, self.spared)

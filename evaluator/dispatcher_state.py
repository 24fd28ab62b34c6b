"""The dispatcher tables of the operators an evaluation reaches (runs in the sandbox).

A candidate can register its own kernel over one of PyTorch's (``torch.library``, with no
assignment to see in its text): a reference whose ``aten::gelu`` now runs the candidate's slow or
wrong kernel is timed and checked against in the candidate's favour.  Reading every operator's
table (about 3,600 operators) costs about 0.1 s on a CUDA build, twice an evaluation: most of what
round three of the integrity checks added to an evaluation's wall time.

So the tables read are those of the operators the evaluation can reach: the ones the reference
dispatches on every shape set (recorded by the legacy profiler, whose record of every dispatcher
entry includes composite operators such as ``aten::linear`` above their decompositions, in well
under a millisecond), the ones the comparison dispatches, and the harness's own (inputs, copies,
the timer's flush; :data:`HARNESS_OPERATORS`), each with all its overloads.  A kernel registered
for an operator outside that set cannot change what the reference computes: every call the
reference makes enters the dispatcher through an operator of the set, or through Python code
that :mod:`evaluator.interpreter_state` snapshots.
"""
from __future__ import annotations

import contextlib
import hashlib

import torch

# What the harness itself dispatches around the reference: inputs (``get_inputs``'s factories, the
# adversarial values), copies of outputs and inputs, the comparison, the timer's L2 flush.
HARNESS_OPERATORS = frozenset(f"aten::{name}" for name in (
    "abs", "all", "allclose", "amax", "any", "as_strided", "clone", "contiguous", "copy_", "count_nonzero",
    "empty", "empty_like", "empty_strided", "eq", "equal", "expand", "fill_", "full", "full_like", "ge",
    "gt", "isclose", "isfinite", "isinf", "isnan", "item", "_local_scalar_dense", "le", "lt", "max",
    "maximum", "mul", "mul_", "nan_to_num", "ne", "normal_", "ones", "ones_like", "rand", "randint",
    "randn", "random_", "reshape", "select", "slice", "stack", "sub", "sum", "to", "_to_copy", "uniform_",
    "unsqueeze", "view", "where", "zero_", "zeros", "zeros_like"))

_OVERLOADS: dict[str, list[str]] = {}  # an operator's name -> its overloads' full names, read once


class Recorder:
    """The operators dispatched on this thread within ``with recorder:`` (several blocks add up)."""

    def __init__(self):
        self.names: set[str] = set()
        self.available = True

    @contextlib.contextmanager
    def __call__(self):
        try:
            from torch.autograd import profiler_legacy
            recording = profiler_legacy.profile()
        except Exception:  # noqa: BLE001 (a torch without it: every table is read instead)
            self.available = False
            yield self
            return
        with recording:
            yield self
        self.names.update(event.name for event in recording.function_events if "::" in event.name)

    def operators(self) -> frozenset[str] | None:
        """What was recorded, with the harness's own; None (every operator) where nothing could be."""
        return frozenset(self.names | HARNESS_OPERATORS) if self.available else None


def _overloads(name: str) -> list[str]:
    if not _OVERLOADS:
        for full in torch._C._dispatch_get_registrations_for_dispatch_key(""):
            _OVERLOADS.setdefault(full.split(".", 1)[0], []).append(full)
    return _OVERLOADS.get(name, [])


def tables_digest(operators: frozenset[str] | None = None) -> str:
    """A digest of the dispatcher registrations of ``operators`` (all their overloads; None: every
    operator's)."""
    if operators is None:
        names = sorted(torch._C._dispatch_get_registrations_for_dispatch_key(""))
    else:
        names = sorted(full for name in operators for full in _overloads(name))
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode())
        digest.update(torch._C._dispatch_dump(name).encode())
    return digest.hexdigest()

"""An island: its own RNG stream and operator mix; proposes children.

Plain Python, tested without Ray; ``islands.ray_backend`` wraps it in an
actor.  The island's population is its cells in the archive: the controller
(the archive's single owner) samples parents from them and hands the island
a :class:`operators.base.Context`.

An island serves many proposals at once (threads of ``LocalBackend``, or a
threaded Ray actor): the operator draw and each proposal's own RNG come from
the island's stream under a lock; the operators then run concurrently.  With
``requests`` set, at most that many of them wait on an LLM at once: the run
loop may hand the island more proposals than that, prepared (parent sampled,
prompt rendered) to send the moment a request comes back.
"""
from __future__ import annotations

import threading

import numpy as np

from evo.core.descriptors import DEFAULT_DESCRIPTORS, NONE, analyse
from evo.core.kernel_source import normalized_hash
from operators.base import Context, Operator, Proposal

# Source analysis is pure Python: under the GIL, threads analysing at once gain nothing, and many
# of them would starve the threads that wait on I/O (the run loop's SQLite, the LLM event loop).
_ANALYSIS = threading.Lock()


class Island:
    def __init__(self, index: int, operators: list[Operator], weights: list[float], seed: int,
                 stream: int = 0, descriptors=DEFAULT_DESCRIPTORS, requests: int | None = None):
        if not operators:
            raise ValueError("an island needs at least one operator")
        if len(weights) != len(operators) or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError("operator weights must be non-negative, one per operator, not all zero")
        self.index = index
        self.seed, self.stream = seed, stream
        self.descriptors = tuple(descriptors)
        self.operators = list(operators)
        self.weights = np.asarray(weights, dtype=float)
        if sum(w for w, op in zip(weights, operators) if not (op.repairs or op.seeds or op.sweeps)) <= 0:
            raise ValueError("an island needs an operator with a positive weight besides repair and seed operators")
        self.repair = next((op for op in operators if op.repairs), None)
        self.seeder = next((op for op in operators if op.seeds), None)
        self.sweeper = next((op for op in operators if op.sweeps), None)
        # For proposals without a sequence number: one stream per (run seed, island, resume count).
        self.rng = np.random.default_rng([seed, index, stream])
        if requests is not None and requests < 1:
            raise ValueError("an island's LLM requests in flight must be >= 1 (None: no limit)")
        self.requests = requests
        self._lock = threading.Lock()
        self._request_slots = threading.BoundedSemaphore(requests) if requests else None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_request_slots")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._request_slots = threading.BoundedSemaphore(self.requests) if self.requests else None

    def _draw(self, context: Context, rng: np.random.Generator) -> Operator | str:
        if context.repair:
            return self.repair or "no repair operator is configured"
        if context.parent is None:
            return self.seeder or "no seed operator is configured"
        if context.sweep:
            return self.sweeper or "no sweep operator is configured"
        usable = [not (op.repairs or op.seeds or op.sweeps) and (context.llm_allowed or not op.needs_llm)
                  for op in self.operators]
        weights = self.weights * np.asarray(usable, dtype=float)
        if weights.sum() <= 0:
            return "the LLM budget is spent and no offline operator is configured"
        weights *= np.asarray([w == 0 or op.applies_to(context.parent) for w, op in zip(weights, self.operators)],
                              dtype=float)
        if weights.sum() <= 0:
            return "no enabled operator can change this parent"
        return self.operators[int(rng.choice(len(self.operators), p=weights / weights.sum()))]

    def _target(self, parent_descriptors: dict[str, str], rng: np.random.Generator) -> dict[str, str]:
        """A neighbouring cell for an LLM operator to aim at: one descriptor moved to another bin."""
        descriptor = self.descriptors[int(rng.integers(len(self.descriptors)))]
        bins = [b for b in descriptor.bins if b not in (NONE, parent_descriptors.get(descriptor.name))]
        return {descriptor.name: bins[int(rng.integers(len(bins)))]} if bins else {}

    def propose(self, context: Context) -> Proposal:
        if context.sequence is not None:
            # The run numbers its proposals and saves the count with every change it commits, so
            # a resumed run gives the next proposal the same stream an uninterrupted one would.
            rng = np.random.default_rng([self.seed, self.index, 1 << 20, context.sequence])
        else:
            with self._lock:
                rng = np.random.default_rng(self.rng.integers(1 << 63))
        operator = self._draw(context, rng)
        if isinstance(operator, str):
            return Proposal("none", None, operator)
        if operator.needs_llm and not context.repair and not context.target and context.parent is not None:
            context.target = self._target(context.parent.descriptors, rng)
        context.request_slots = self._request_slots
        try:
            proposal = operator.propose(context, rng)
        except Exception as exc:  # an operator bug must not stop the island
            return Proposal(operator.name, None, f"operator {operator.name} raised {type(exc).__name__}: {exc}")
        if proposal.source is not None:
            # Source analysis happens here, in parallel, not in the archive's single writer.
            # One parse of the child gives both its hash and its descriptors.
            try:
                with _ANALYSIS:
                    proposal.source_hash, descriptors = analyse(proposal.source, self.descriptors)
            except Exception as exc:  # the proposal still carries its LLM calls: they are accounted
                proposal.note, proposal.source = f"analysing the child raised {type(exc).__name__}: {exc}", None
                return proposal
            parent = context.parent
            if parent is not None and proposal.source_hash == (parent.source_hash or normalized_hash(parent.source)):
                proposal.note, proposal.source = "the child is identical to its parent", None
                return proposal
            proposal.descriptors = descriptors
        return proposal

    def ping(self) -> int:
        return self.index

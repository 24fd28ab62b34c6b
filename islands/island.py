"""An island: its own RNG stream and operator mix; proposes children.

Plain Python, tested without Ray; ``islands.ray_backend`` wraps it in an
actor.  The island's population is its cells in the archive: the controller
(the archive's single owner) samples parents from them and hands the island
a :class:`operators.base.Context`.
"""
from __future__ import annotations

import numpy as np

from evo.descriptors import DEFAULT_DESCRIPTORS, describe
from evo.kernel_source import normalized_hash
from operators.base import Context, Operator, Proposal


class Island:
    def __init__(self, index: int, operators: list[Operator], weights: list[float], seed: int,
                 stream: int = 0, descriptors=DEFAULT_DESCRIPTORS):
        if not operators:
            raise ValueError("an island needs at least one operator")
        if len(weights) != len(operators) or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError("operator weights must be non-negative, one per operator, not all zero")
        self.index = index
        self.seed, self.stream = seed, stream
        self.descriptors = tuple(descriptors)
        self.operators = list(operators)
        self.weights = np.asarray(weights, dtype=float) / float(sum(weights))
        # One independent stream per (run seed, island, resume count).
        self.rng = np.random.default_rng([seed, index, stream])

    def propose(self, context: Context) -> Proposal:
        operator = self.operators[int(self.rng.choice(len(self.operators), p=self.weights))]
        try:
            proposal = operator.propose(context, self.rng)
        except Exception as exc:  # an operator bug must not stop the island
            return Proposal(operator.name, None, f"operator {operator.name} raised {type(exc).__name__}: {exc}")
        if proposal.source is not None:
            # Source analysis happens here, in parallel, not in the archive's single writer.
            proposal.source_hash = normalized_hash(proposal.source)
            proposal.descriptors = describe(proposal.source, self.descriptors)
        return proposal

    def ping(self) -> int:
        return self.index

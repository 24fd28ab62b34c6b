"""A program: one candidate kernel of one task, with where it came from."""
from __future__ import annotations

from dataclasses import dataclass, field

from evaluator.result import EvalResult

SEED = "seed"  # a seed kernel shipped with the task or derived from torch.compile
LLM_SEED = "llm_seed"  # a first kernel an LLM wrote from the reference, for a task that had no seed
# Programs a task starts from: no parent, outside the evaluation budget, the task's seed speedup.
SEED_OPERATORS = (SEED, LLM_SEED)


@dataclass
class Program:
    """A candidate kernel as the archive stores it and operators see it."""

    id: int
    task: str
    island: int
    generation: int
    operator: str
    source: str
    parent_ids: tuple[int, ...] = ()
    inspiration_ids: tuple[int, ...] = ()
    result: EvalResult | None = None
    descriptors: dict[str, str] = field(default_factory=dict)
    source_hash: str = ""  # normalised (see evo.core.kernel_source.normalized_hash)

    @property
    def fitness(self) -> float | None:
        """Measured speedup over the reference, for correct programs only."""
        if self.result is None or not self.result.correct:
            return None
        return self.result.speedup

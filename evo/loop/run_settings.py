"""What a run loop is asked to do: its budget, its seed, and how much it keeps under way."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunSettings:
    dir: str
    seed: int = 0
    budget_evaluations: int = 48  # evaluations of children (seeds are extra)
    budget_per_task: int | None = None  # evaluations of children per task (None: no cap; evo.loop.task_budget)
    proposals_per_island: int = 2  # proposals in flight per island (with LLM operators: requests in flight)
    # With LLM operators: proposals per island prepared beyond its requests in flight, each sent the
    # moment a request comes back, so the endpoint never waits on the run loop's bookkeeping.
    # None: a quarter of proposals_per_island, at least one (experiments/proposal_rate_bench.md).
    prepared_per_island: int | None = None
    inspirations: int = 2
    max_failed_proposals: int = 200  # in a row, before the run stops proposing
    stats_interval: int = 8  # child evaluations between entries of the QD statistics history
    failures_shown: int = 5  # recent failures on an island shown to LLM operators
    llm_seeds: int = 4  # seed proposals (and their programs not yet evaluated) at a time per task without one
    llm_seed_attempts: int = 12  # LLM proposals for a task without a correct program before it is set aside
    sweep_children: int = 0  # a new elite's tuning sweep (operators.sweep): its children; 0: none

    def __post_init__(self):
        if self.budget_evaluations < 0:
            raise ValueError("run.budget.evaluations must be >= 0")
        if self.budget_per_task is not None and (isinstance(self.budget_per_task, bool)
                                                 or not isinstance(self.budget_per_task, int)
                                                 or self.budget_per_task < 1):
            raise ValueError(f"run.budget.per_task must be an integer >= 1, or null for no cap per task "
                             f"(got {self.budget_per_task!r})")
        if self.proposals_per_island < 1:
            raise ValueError("run.proposals_per_island must be >= 1")
        if self.prepared_per_island is not None and self.prepared_per_island < 0:
            raise ValueError("run.prepared_per_island must be >= 0 or null")
        if self.stats_interval < 1:
            raise ValueError("run.stats_interval must be >= 1")
        if self.llm_seeds < 0 or self.llm_seed_attempts < 0:
            raise ValueError("run.llm_seeds and run.llm_seed_attempts must be >= 0 (0: no LLM seeds)")

    @property
    def prepared(self) -> int:
        """Proposals per island prepared beyond its requests in flight, with LLM operators."""
        if self.prepared_per_island is not None:
            return self.prepared_per_island
        return max(1, -(-self.proposals_per_island // 4))

    def proposals_held(self, llm: bool) -> int:
        """Proposals the loop keeps out per island: those in flight, and with LLM operators the prepared."""
        return self.proposals_per_island + (self.prepared if llm else 0)

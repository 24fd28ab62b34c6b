"""First kernels from an LLM for the tasks that have no correct program: which task asks next, when to stop.

A task without a seed kernel (none shipped, none derived from torch.compile), or
whose seeds all failed, is searched from kernels an LLM writes from its reference
(``operators.llm.LLMSeed``): programs of operator ``llm_seed`` without a parent,
evaluated like any child, their failures repaired like any child's.  Until the
task has a correct program every LLM proposal for it (a seed, or the repair of a
failed one) is an attempt; ``at_once`` of them are under way at a time (proposals
out and programs waiting for their evaluation), so that each wave is asked with
the failures of the one before; after ``attempts`` with none correct the task is
set aside.  Once it has a correct program it is searched like any other.

The counts are the run's, not this session's: saved in the archive's ``meta``
(with every program and evaluation the run loop commits), read back on resume.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Iterable

ATTEMPTS_META = "seeding.attempts"  # {task: LLM proposals made for it while it had no correct program}


class Seeding:
    def __init__(self, *, at_once: int, attempts: int):
        if at_once < 1 or attempts < 1:
            raise ValueError("LLM seeding needs run.llm_seeds >= 1 and run.llm_seed_attempts >= 1")
        self.at_once = at_once
        self.limit = attempts
        self.attempts: Counter[str] = Counter()

    def restore(self, saved: str | None) -> None:
        self.attempts = Counter(json.loads(saved)) if saved else Counter()

    def meta(self) -> dict[str, str]:
        return {ATTEMPTS_META: json.dumps(dict(sorted(self.attempts.items())))}

    def may_attempt(self, task: str, out: int) -> bool:
        """Another attempt for ``task`` fits its limit, with ``out`` of its proposals still under way."""
        return self.attempts[task] + out < self.limit

    def next_task(self, unready: Iterable[str], out: Counter, waiting: Counter) -> str | None:
        """The task the next seed proposal is for: of those without a correct program that may make
        another attempt and have fewer than ``at_once`` under way, the one with the fewest under way,
        then the fewest attempts; None when none may."""
        wanting = [t for t in unready if out[t] + waiting[t] < self.at_once and self.may_attempt(t, out[t])]
        return min(wanting, key=lambda t: (out[t] + waiting[t], self.attempts[t], t)) if wanting else None

    def attempted(self, task: str) -> int:
        """Count an attempt that came back (a program or a failure); its number among the task's."""
        self.attempts[task] += 1
        return self.attempts[task]

    def exhausted(self, task: str) -> bool:
        return self.attempts[task] >= self.limit

    def reason(self, task: str, last: str) -> str:
        return (f"no correct kernel after {self.attempts[task]} LLM attempts (run.llm_seed_attempts="
                f"{self.limit}); the last: {last}")


def llm_seeding(settings, operators: list, llm: bool) -> Seeding | None:
    """The run's seeding, when an LLM and a seed operator are configured (``run.llm_seeds`` and
    ``run.llm_seed_attempts`` > 0)."""
    if not llm or not settings.llm_seeds or not settings.llm_seed_attempts or not any(op.seeds for op in operators):
        return None
    return Seeding(at_once=settings.llm_seeds, attempts=settings.llm_seed_attempts)

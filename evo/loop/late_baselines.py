"""Results recorded before their task's torch.compile baseline was measured.

In a search the evaluator does not hold a result for its task's baseline
(``Evaluator.evaluate(late_baseline=True)``): ``speedup_vs_compiled`` is a
figure to report, not the fitness, and waiting held the caller's evaluation
slot, and so the search, for the 5-16 s of a compile.  Such results say
``compile_baseline: "pending"``; this fills their archive rows in from the
ratio a later result of the same task and evaluator carries, or, at the end of
the run, from what each evaluator settled; a resumed run's rows still without it
are filled by the session's first evaluator.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from evaluator import EvalResult
from evo.core.program import Program

if TYPE_CHECKING:
    from islands.backend import Backend


class LateBaselines:
    def __init__(self, archive, evaluators: int):
        self.archive = archive
        self.evaluators = max(1, evaluators)  # evaluation slot n is on evaluator n % evaluators
        self._pending: dict[tuple[str, int], list[int]] = {}  # (task, evaluator) -> program ids
        self.late = self.filled = 0  # results recorded before their baseline; rows filled in since

    def recorded(self, program: Program, slot: int, result: EvalResult) -> None:
        """``result`` (of ``program``, evaluated in ``slot``) was recorded: note it if its baseline is
        to come, and fill in the rows waiting for one it brings."""
        extra = result.extra or {}
        key = (program.task, slot % self.evaluators)
        if extra.get("compile_baseline") == "pending":
            self._pending.setdefault(key, []).append(program.id)
            self.late += 1
        elif extra.get("compile_baseline_ratio") and key in self._pending:
            self.filled += self.archive.fill_compiled_baseline(self._pending.pop(key), extra["compile_baseline_ratio"])

    def resumed(self, tasks) -> None:
        """A resumed run: its timed rows without a torch.compile figure (the last session ended before
        their baseline came, or none was to come) are filled by this session's first evaluator."""
        for program_id, task in self.archive.without_compiled_baseline():
            if task in tasks:
                self._pending.setdefault((task, 0), []).append(program_id)

    @property
    def pending(self) -> int:
        return sum(map(len, self._pending.values()))

    def settle(self, backend: Backend) -> int:
        """Fill the rows still waiting from each evaluator's settled baselines (measurements still
        under way are awaited); a task whose baseline failed keeps none.  Returns the rows filled."""
        if not self._pending:
            return 0
        settled, filled = backend.settled_baselines(), 0
        for (task, evaluator), ids in sorted(self._pending.items()):
            ratio = (settled[evaluator].get(task) or {}).get("ratio") if evaluator < len(settled) else None
            if ratio:
                filled += self.archive.fill_compiled_baseline(ids, ratio)
        self._pending.clear()
        self.filled += filled
        return filled

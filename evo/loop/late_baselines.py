"""Results recorded before their task's torch.compile baseline was measured.

In a search the evaluator does not hold a result for its task's baseline
(``Evaluator.evaluate(late_baseline=True)``): ``speedup_vs_compiled`` is a
figure to report, not the fitness, and waiting held the caller's evaluation
slot, and so the search, for the 5-16 s of a compile.  Such results say
``compile_baseline: "pending"``; this fills their archive rows in from the
compiled-over-eager ratio a later result of the same task carries, or, at the
end of the run, from what the evaluators settled.

A ratio belongs to a task and a GPU model (the result's ``device``), not to one
evaluator: on a node of four GPUs each evaluator measures its own, one task at a
time, and a session stopped early (a time limit, Ctrl-C) left 40% of a
32-problem search's rows without a figure while the first evaluator to measure
a task could have filled them all.  At the end of a run, a task whose rows still
wait and whose baseline no evaluator of that GPU model measured is measured
then, spread over the evaluators: every timed row of a finished run has its
figure unless torch.compile failed on its task.  A resumed run's rows still
without one wait the same way.
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
        self._pending: dict[tuple[str, str], list[int]] = {}  # (task, device) -> program ids
        self._devices: dict[int, str] = {}  # evaluator -> the device its results name
        self.late = self.filled = 0  # results recorded before their baseline; rows filled in since

    def recorded(self, program: Program, slot: int, result: EvalResult) -> None:
        """``result`` (of ``program``, evaluated in ``slot``) was recorded: note it if its baseline is
        to come, and fill in the rows of its task and device waiting for one it brings."""
        extra = result.extra or {}
        if result.device:
            self._devices[slot % self.evaluators] = result.device
        key = (program.task, result.device or "")
        if extra.get("compile_baseline") == "pending":
            self._pending.setdefault(key, []).append(program.id)
            self.late += 1
        elif extra.get("compile_baseline_ratio") and key in self._pending:
            self.filled += self.archive.fill_compiled_baseline(self._pending.pop(key), extra["compile_baseline_ratio"])

    def resumed(self, tasks) -> None:
        """A resumed run: its timed rows without a torch.compile figure (the last session ended before
        their baseline came, or none was to come) wait for this session's ratio of their task."""
        for program_id, task, device in self.archive.without_compiled_baseline():
            if task in tasks:
                self._pending.setdefault((task, device or ""), []).append(program_id)

    @property
    def pending(self) -> int:
        return sum(map(len, self._pending.values()))

    def settle(self, backend: Backend, sources: dict[str, str] | None = None) -> int:
        """Fill the rows still waiting from the evaluators' settled baselines (measurements still under
        way are awaited).  ``sources`` (task name -> problem source): a waiting task that no evaluator
        of its device has measured is then measured, the tasks spread over those evaluators.  A task
        whose baseline failed keeps none.  Returns the rows filled."""
        filled = self._fill(backend.settled_baselines()) if self._pending else 0
        ask: list[dict[str, str]] = [{} for _ in range(self.evaluators)]
        for n, (task, device) in enumerate(sorted(self._pending)):
            if sources and task in sources:
                fits = [e for e in range(self.evaluators) if self._devices.get(e, device) == device]
                fits = fits or list(range(self.evaluators))
                ask[fits[n % len(fits)]][task] = sources[task]
        if any(ask):
            filled += self._fill(backend.settled_baselines(ask=ask))
        self._pending.clear()
        self.filled += filled
        return filled

    def _fill(self, settled: list[dict[str, dict]]) -> int:
        """The waiting rows whose task an evaluator of their device has a ratio for, filled and let go."""
        filled = 0
        for (task, device), ids in sorted(self._pending.items()):
            ratios = [s[task]["ratio"] for e, s in enumerate(settled)
                      if self._devices.get(e, device) == device and (s.get(task) or {}).get("ratio")]
            if ratios:
                filled += self.archive.fill_compiled_baseline(ids, ratios[0])
                del self._pending[(task, device)]
        return filled

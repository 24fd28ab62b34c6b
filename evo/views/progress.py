"""Live progress of a run: a rich progress bar and a JSONL event log."""
from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from evo.core.program import SEED_OPERATORS


class RunEvents:
    """Receives the controller's events; shows them and appends them to ``events.jsonl``."""

    def __init__(self, run_dir: Path, budget: int, *, show: bool = True, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self._log = open(run_dir / "events.jsonl", "a", encoding="utf-8")
        self._best: dict[str, float] = {}
        self._correct = 0
        self._evaluated = 0
        self._in_flight: dict = {}
        self._progress = None
        self._budget = budget
        self.show_lines = show
        self._last_line = -1
        if show and self.console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=self.console,
            )
            self._bar = self._progress.add_task("children evaluated", total=budget, status="starting")
            self._progress.start()

    def _write(self, kind: str, fields: dict) -> None:
        # cpu_s: this process's CPU time so far (the run loop's own cost, without islands and evaluators).
        self._log.write(json.dumps({"t": round(time.time(), 3), "cpu_s": round(time.process_time(), 3),
                                    "event": kind, **fields}) + "\n")
        self._log.flush()

    def __call__(self, kind: str, **fields) -> None:
        if kind == "evaluated":
            program, result = fields.pop("program"), fields.pop("result")
            self._evaluated += 1
            self._correct += result.correct
            if result.correct and result.speedup is not None:
                self._best[program.task] = max(self._best.get(program.task, 0.0), result.speedup)
            fields.update(program_id=program.id, task=program.task, island=program.island,
                          operator=program.operator, status=result.status.value, speedup=result.speedup,
                          reason=result.reason[:200])
            if program.operator in SEED_OPERATORS and not result.correct:
                self.console.print(f"[yellow]seed of {program.task} is {result.status.value}: {result.reason}")
        self._write(kind, fields)
        if kind == "stalled":
            self.console.print(f"[yellow]{fields['failed']} proposals in a row failed or were duplicates; "
                               "no more proposals")
        if "in_flight" in fields:
            self._in_flight = fields["in_flight"]
        if "children_done" in fields:
            self._show(fields["children_done"])

    def _show(self, done: int) -> None:
        best = " ".join(f"{t}:{s:.3g}x" for t, s in sorted(self._best.items()))
        status = f"correct {self._correct}/{self._evaluated}  best {best}"
        flight = self._in_flight
        if flight:
            status += (f"  in flight: {flight['llm_requests']} LLM, {flight['proposals']} proposals, "
                       f"{flight['evaluations']} evaluations ({flight['queued']} queued)")
            if "llm_usd" in flight:
                status += f"  spent ${flight['llm_usd']:.2f}"
        if self._progress is not None:
            self._progress.update(self._bar, completed=done, status=status)
        elif self.show_lines:
            # Not a terminal (a log file, CI): a plain line every tenth of the budget.
            step = max(1, self._budget // 10)
            if done != self._last_line and (done % step == 0 or done == self._budget):
                self.console.print(f"[{done}/{self._budget}] {status}", soft_wrap=True, highlight=False)
                self._last_line = done

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._log.close()

"""What the run loop learns from each child: rewards for the model bandit and the prompt fragments,
the recent failures shown to LLM operators, the failed children queued for repair, and the new
elites' tuning sweeps (``operators.sweep``) queued as proposals."""
from __future__ import annotations

from collections import deque
from typing import Callable

import numpy as np

from archive import Insert
from evaluator import EvalResult
from evo.core.program import Program
from operators.llm import LLMRepair
from operators.steering import LLMSteering
from operators.sweep import TuningSweep


class Feedback:
    def __init__(self, steering: LLMSteering | None, rng: np.random.Generator, events: Callable[..., None],
                 failures_shown: int, sweep_children: int = 0):
        self.steering = steering
        self.prompts = steering.prompts if steering is not None else None
        self.rng = rng  # the run loop's: its draws are saved and restored with the loop's state
        self.events = events
        self.failures_shown = failures_shown
        self.repairs: deque[Program] = deque()  # failed children waiting for their one repair attempt
        self.sweep_children = sweep_children
        self.sweeps: deque[tuple[Program, int]] = deque()  # (a new elite, which neighbour) still to propose
        self._swept_last = False
        self._fastest: dict[str, float] = {}  # task -> the fastest elite's speedup seen in this session
        self._failures: dict[tuple[str, int], deque[dict]] = {}  # (task, island) -> recent failures
        self._llm_children: dict[int, tuple[str, float | None]] = {}  # program id -> (model, parent fitness)
        self._fragment_children: dict[int, int] = {}  # program id -> the prompt fragment it was asked with

    def failures(self, task: str, island: int | None) -> list[dict]:
        """Recent failures of ``task`` on ``island`` (None: on every island, for a seed proposal, which
        is written from the reference alone and should not repeat any island's mistakes)."""
        if island is not None:
            return list(self._failures.get((task, island), ()))
        recent = [f for (name, _), fs in sorted(self._failures.items()) if name == task for f in fs]
        return recent[-self.failures_shown:]

    def note_failure(self, task: str, island: int, operator: str, status: str, reason: str, stage: str = "") -> None:
        recent = self._failures.setdefault((task, island), deque(maxlen=self.failures_shown))
        recent.append({"operator": operator, "status": status, "stage": stage,
                       "reason": reason.splitlines()[0][:300] if reason else ""})

    def made(self, program: Program, model: str | None, parent: Program | None, fragment: int | None,
             prompted: bool) -> None:
        """A proposal became ``program`` (``prompted``: it made LLM calls)."""
        if model is not None:
            self._llm_children[program.id] = (model, parent.fitness if parent else None)
        if fragment is not None and prompted:  # an offline operator's child used no prompt
            self._fragment_children[program.id] = fragment

    def failed(self, task: str, island: int, operator: str, failure: str, model: str | None,
               fragment: int | None, prompted: bool) -> None:
        """A proposal came back without a child."""
        if model is not None:
            self.steering.ensemble.reward(model, False)
        if fragment is not None and prompted:
            self._reward_fragment(fragment, False)
        if operator != "none" and not failure.startswith("duplicate"):
            self.note_failure(task, island, operator, "no child", failure)

    def evaluated(self, program: Program, result: EvalResult, insert: Insert) -> None:
        """Feed an evaluated child back: the bandit's reward, the island's failures, a repair."""
        model, parent_fitness = self._llm_children.pop(program.id, (None, None))
        fragment = self._fragment_children.pop(program.id, None)
        improved = insert is not Insert.NOT_ADDED or (
            result.correct and result.speedup is not None and (parent_fitness is None
                                                               or result.speedup > parent_fitness))
        if model is not None:
            self.steering.ensemble.reward(model, improved)
        if fragment is not None:
            self._reward_fragment(fragment, improved)
        if result.correct:
            return
        self.note_failure(program.task, program.island, program.operator, result.status.value, result.reason,
                          result.extra.get("stage", ""))
        steering = self.steering
        if (steering is not None and steering.repair_probability > 0 and program.operator != LLMRepair.name
                and self.rng.random() < steering.repair_probability):
            program.result = result
            self.repairs.append(program)

    def elite(self, program: Program, speedup: float | None) -> None:
        """``program`` became an elite: if it is its task's fastest kernel yet in this session, its
        tuning sweep is queued, unless it came from a sweep (a slow kernel in a new cell is not tuned)."""
        if speedup is None or speedup <= self._fastest.get(program.task, 0.0):
            return
        self._fastest[program.task] = speedup
        if self.sweep_children and program.operator != TuningSweep.name:
            self.sweeps.extend((program, attempt) for attempt in range(self.sweep_children))

    def next_sweep(self, room: list[int]) -> tuple[Program, int] | None:
        """The next sweep child to propose, if its elite's island has room; every other proposal at
        most, so the other operators go on exploring while elites are tuned."""
        if self._swept_last or not self.sweeps or self.sweeps[0][0].island not in room:
            self._swept_last = False
            return None
        self._swept_last = True
        return self.sweeps.popleft()

    def _reward_fragment(self, fragment: int, improved: bool) -> None:
        bred = self.prompts.reward(fragment, improved, self.rng)
        if bred is not None:
            self.events("prompt_bred", fragment=bred.id, parents=bred.parents, text=" ".join(bred.sentences),
                        pool=len(self.prompts.fragments))

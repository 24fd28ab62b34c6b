"""How much work the run loop keeps queued: back-pressure from how long proposals and evaluations take."""
from __future__ import annotations

import sys
import time
from concurrent.futures import Future
from contextlib import contextmanager


class Pacing:
    """Moving averages of proposal and evaluation durations, and the evaluation queue they allow."""

    def __init__(self, slots: int):
        self.slots = slots
        self._started: dict[Future, float] = {}  # when each proposal or evaluation was submitted
        self.seconds = {"proposal": 0.0, "evaluation": 0.0}

    def started(self, future: Future) -> None:
        self._started[future] = time.monotonic()

    def finished(self, future: Future, kind: str) -> None:
        started = self._started.pop(future, None)
        if started is not None:
            seconds, average = time.monotonic() - started, self.seconds[kind]
            self.seconds[kind] = seconds if not average else 0.8 * average + 0.2 * seconds

    def backlog(self) -> int:
        """Children may wait for an evaluation slot as long as the slots drain them before a proposal
        started now comes back (at least two per slot)."""
        proposal_s, evaluation_s = self.seconds["proposal"], self.seconds["evaluation"]
        if proposal_s and evaluation_s:
            return max(2 * self.slots, int(self.slots * proposal_s / evaluation_s))
        return 2 * self.slots


@contextmanager
def switch_interval(seconds: float | None):
    """The interpreter's GIL switch interval at most ``seconds`` inside the block (None: unchanged)."""
    before = sys.getswitchinterval()
    if seconds is not None:
        sys.setswitchinterval(min(before, seconds))
    try:
        yield
    finally:
        sys.setswitchinterval(before)

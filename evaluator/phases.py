"""Where an evaluation's time goes: seconds per phase, accumulated (a phase may run more than once,
as timing does after a re-verification)."""
from __future__ import annotations

import time
from contextlib import contextmanager


class Phases(dict):
    """``{phase_s: seconds}``; ``with phases.timed("inputs_s"): ...`` adds the block's wall time."""

    @contextmanager
    def timed(self, name: str):
        began = time.monotonic()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.monotonic() - began

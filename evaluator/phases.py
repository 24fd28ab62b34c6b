"""Where an evaluation's time goes: seconds per phase, accumulated (a phase may run more than once,
as timing does after a re-verification)."""
from __future__ import annotations

import time
from contextlib import contextmanager


class Phases(dict):
    """``{phase_s: seconds}``; ``with phases.timed("inputs_s"): ...`` adds the block's wall time.
    ``failed_in``: the innermost phase an exception left, where an evaluation failed."""

    failed_in = ""

    @contextmanager
    def timed(self, name: str):
        began = time.monotonic()
        try:
            yield
        except BaseException:
            self.failed_in = self.failed_in or name
            raise
        finally:
            self[name] = self.get(name, 0.0) + time.monotonic() - began

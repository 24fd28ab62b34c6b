"""Exclusive timing on a shared GPU: several evaluations in flight, one timed at a time, alone.

With ``evaluator.pipeline`` > 1 an evaluator runs that many sandbox workers on its GPU: while one
candidate is timed, the next ones start, load, compile and are checked for correctness.  Timing
must not share the GPU, so the evaluation about to time asks this gate for it (through its worker,
:mod:`evaluator.worker`); the gate then stops (SIGSTOP) every other worker of the GPU and every
process below them, lets the work they had queued on the GPU drain, and starts them again
(SIGCONT) once the timing is over.  A stopped evaluation is frozen between two instructions: its
checks resume where they were, and the time it spent stopped counts against no timeout.

The gate lives in the host process (the engine, or an evaluator actor), never in candidate code:
an evaluation that asks for the gate and keeps it holds it at most until its own timeout.
"""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
import time

from evaluator.containment import descendants

DRAIN_S = 0.05  # what a stopped evaluation had queued on the GPU finishes in this time (then warm-up)


class TimingGate:
    """One per GPU: :meth:`acquire` stops the other members' processes until :meth:`release`."""

    def __init__(self, drain_s: float = DRAIN_S):
        self.drain_s = drain_s
        self._lock = threading.Lock()
        self._members: list = []  # SandboxWorkers: each has ``pid()`` and ``paused_s``
        self._holder = None
        self._stopped: list[int] = []
        self._since = 0.0
        self.waited_s = 0.0  # total time evaluations waited for the gate
        self.held = 0  # timings done under the gate

    def join(self, member) -> None:
        self._members.append(member)

    def acquire(self, member) -> None:
        asked = time.monotonic()
        self._lock.acquire()
        self.waited_s += time.monotonic() - asked
        self._holder, self.held = member, self.held + 1
        self._stopped, self._since = [], time.monotonic()
        for other in self._members:
            if other is not member and (pid := other.pid()) is not None:
                self._stopped += _signal_tree(pid, signal.SIGSTOP)
        if self._stopped:
            time.sleep(self.drain_s)

    def release(self, member) -> None:
        if self._holder is not member:
            return  # a stray release (a worker restarted mid-timing): nothing held
        paused = time.monotonic() - self._since
        for pid in reversed(self._stopped):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        for other in self._members:
            if other is not member:
                other.paused_s += paused  # their deadlines move by the time they were stopped
        self._holder, self._stopped = None, []
        self._lock.release()

    def holds(self, member) -> bool:
        return self._holder is member


def _signal_tree(root: int, sig: int) -> list[int]:
    """``sig`` to ``root`` first (so that it forks no more), then to every process below it, again
    for any forked while the others were being stopped."""
    sent: list[int] = []
    for _ in range(5):
        new = [pid for pid in [root, *descendants(root)] if pid not in sent]
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, sig)
                sent.append(pid)
            except ProcessLookupError:
                pass
    return sent


@contextmanager
def gpu_alone(fds: list[int] | None, phases: dict | None = None):
    """In the evaluation process: hold the GPU alone for the block (through the worker and the host's
    gate); a no-op without a gate.  The wait is added to ``phases["gate_wait_s"]``."""
    if not fds:
        yield
        return
    want, go = fds
    began = time.monotonic()
    os.write(want, b"W")
    while (reply := os.read(go, 1)) and reply != b"G":
        pass
    if phases is not None:
        phases["gate_wait_s"] = phases.get("gate_wait_s", 0.0) + time.monotonic() - began
    try:
        yield
    finally:
        os.write(want, b"D")

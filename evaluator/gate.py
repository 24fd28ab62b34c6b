"""Exclusive timing on a shared GPU: several evaluations in flight, one timed at a time, alone.

With ``evaluator.pipeline`` > 1 an evaluator runs that many sandbox workers on its GPU: while one
candidate is timed, the next ones start, load, compile and are checked for correctness.  Timing
must not share the GPU, so the evaluation about to time asks this gate for it (through its worker,
:mod:`evaluator.worker`); the gate then stops (SIGSTOP) every other worker of the GPU and every
process below them, lets the work they had queued on the GPU drain, and starts them again
(SIGCONT) once the timing is over.  A stopped evaluation is frozen between two instructions: its
checks resume where they were, and the time it spent stopped counts against no timeout.

An evaluation inside Triton's JIT compile (:func:`compile_sections`) works on the host alone: its
queued GPU work drained, it says so (``C``) and the gate spares it (and the ``ptxas`` below it), so
that the next candidate compiles while this one times.  When the compile is over (``E``) it waits
for the gate's go-ahead, stopped if another evaluation is timing.  A candidate that claimed a
compile and used the GPU meanwhile would slow the evaluation being timed, never its own figures.

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
        self._lock = threading.Lock()  # held for a whole timing
        self._state = threading.Lock()  # the holder, the stopped processes, the members compiling
        self._members: list = []  # SandboxWorkers: each has ``pid()`` and ``paused_s``
        self._holder = None
        self._stopped: list[int] = []
        self._compiling: set[int] = set()  # id() of members inside a JIT compile: not stopped
        self._since = 0.0
        self.waited_s = 0.0  # total time evaluations waited for the gate
        self.held = 0  # timings done under the gate
        self.spared = 0  # members left compiling while another timed

    def join(self, member) -> None:
        self._members.append(member)

    def acquire(self, member) -> None:
        asked = time.monotonic()
        self._lock.acquire()
        with self._state:
            self.waited_s += time.monotonic() - asked
            self._holder, self.held = member, self.held + 1
            self._stopped, self._since = [], time.monotonic()
            for other in self._members:
                if other is member:
                    continue
                if id(other) in self._compiling:
                    self.spared += 1
                elif (pid := other.pid()) is not None:
                    self._stopped += _signal_tree(pid, signal.SIGSTOP)
        if self._stopped:
            time.sleep(self.drain_s)

    def compiling(self, member) -> None:
        """``member`` works on the host alone (a JIT compile, its GPU queue drained): not stopped."""
        with self._state:
            self._compiling.add(id(member))

    def compiled(self, member) -> None:
        """``member``'s compile is over (or its evaluation): stopped now if another is timing."""
        with self._state:
            if id(member) not in self._compiling:
                return
            self._compiling.discard(id(member))
            if self._holder is not None and self._holder is not member and (pid := member.pid()) is not None:
                self._stopped += _signal_tree(pid, signal.SIGSTOP)

    def release(self, member) -> None:
        with self._state:
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


_compile_depth = 0
compile_wait_s = 0.0  # this process's wait for the go-ahead after its compiles


def compile_sections(fds: list[int] | None, drain) -> bool:
    """In the evaluation process of a pipeline: Triton's JIT compiles become sections that another
    evaluation's timing need not stop (``C`` ... ``E``, then the gate's go-ahead).  ``drain`` waits
    for this process's queued GPU work first.  False where Triton has no ``_do_compile`` to wrap."""
    from triton.runtime.jit import JITFunction

    original = getattr(JITFunction, "_do_compile", None)
    if not fds or original is None or getattr(original, "_gate_section", False):
        return False
    want, go = fds

    def in_section(kernel, *args, **kwargs):
        global _compile_depth, compile_wait_s
        if _compile_depth:  # a compile inside a compile: one section
            return original(kernel, *args, **kwargs)
        drain()
        _compile_depth += 1
        os.write(want, b"C")
        try:
            return original(kernel, *args, **kwargs)
        finally:
            _compile_depth -= 1
            asked = time.monotonic()
            os.write(want, b"E")
            while (reply := os.read(go, 1)) and reply != b"G":
                pass
            compile_wait_s += time.monotonic() - asked

    in_section._gate_section = True
    JITFunction._do_compile = in_section
    return True

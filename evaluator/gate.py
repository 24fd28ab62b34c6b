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
The start of a request is host work too (:meth:`TimingGate.compiling` as the host sends it: the
worker forks the child, which sets up its containment, its CUDA context and reads the task, no
candidate code yet): spared until the child says ``E`` (:func:`host_start_over`) before its first GPU work.  So is its end,
once its timing is over (:func:`gpu_alone`'s ``host_after``: the result written, the process gone
and the worker's reply), which the next timing would otherwise hold up by the whole of its length.

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
        self._stopped: dict[int, list[int]] = {}  # id() of a member -> the pids stopped for the holder
        self._compiling: set[int] = set()  # id() of members on host work (a JIT compile, a start): not stopped
        self._since = 0.0
        self.waited_s = 0.0  # total time evaluations waited for the gate
        self.held = 0  # timings done under the gate
        self.spared = 0  # members left compiling while another timed

    def join(self, member) -> None:
        with self._state:  # a member may join while another times (the baseline's worker, say)
            self._members.append(member)

    def leave(self, member) -> None:
        """``member`` (closed) is no longer stopped, nor counted: a preparation's worker, say."""
        with self._state:
            self._members = [m for m in self._members if m is not member]
            self._compiling.discard(id(member))
            for pid in reversed(self._stopped.pop(id(member), [])):
                _resume(pid)

    def acquire(self, member) -> None:
        asked = time.monotonic()
        self._lock.acquire()
        with self._state:
            self.waited_s += time.monotonic() - asked
            self._holder, self.held = member, self.held + 1
            self._stopped, self._since = {}, time.monotonic()
            for other in self._members:
                if other is member:
                    continue
                if id(other) in self._compiling:
                    self.spared += 1
                elif (pid := other.pid()) is not None:
                    self._stopped[id(other)] = _signal_tree(pid, signal.SIGSTOP)
        if self._stopped:
            time.sleep(self.drain_s)

    def compiling(self, member) -> None:
        """``member`` works on the host alone until :meth:`compiled` (a JIT compile, its GPU queue drained;
        a request's start): not stopped, and going on at once if it was (nothing of it is queued on the
        GPU: an idle member, or one stopped just after it drained)."""
        with self._state:
            self._compiling.add(id(member))
            for pid in reversed(self._stopped.pop(id(member), [])):
                _resume(pid)

    def compiled(self, member) -> None:
        """``member``'s host work is over (or its request): stopped now if another is timing."""
        with self._state:
            if id(member) not in self._compiling:
                return
            self._compiling.discard(id(member))
            if self._holder is not None and self._holder is not member and (pid := member.pid()) is not None:
                self._stopped.setdefault(id(member), []).extend(_signal_tree(pid, signal.SIGSTOP))

    def release(self, member) -> None:
        with self._state:
            if self._holder is not member:
                return  # a stray release (a worker restarted mid-timing): nothing held
            paused = time.monotonic() - self._since
            for pids in self._stopped.values():
                for pid in reversed(pids):
                    _resume(pid)
            for other in self._members:
                if other is not member:
                    other.paused_s += paused  # their deadlines move by the time they were stopped
            self._holder, self._stopped = None, {}
        self._lock.release()

    def holds(self, member) -> bool:
        return self._holder is member


def _resume(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


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
def gpu_alone(fds: list[int] | None, phases: dict | None = None, *, host_after=None):
    """In the evaluation process: hold the GPU alone for the block (through the worker and the host's
    gate); a no-op without a gate.  The wait is added to ``phases["gate_wait_s"]``.

    ``host_after`` (a drain: it waits for this process's queued GPU work): what the request does after
    the block is host work (its result written, its process gone), spared by the gate until the
    request ends; said (``C``) before the gate is let go, so the next timing never stops it."""
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
    ended = False
    try:
        yield
        ended = True
    finally:
        if ended and host_after is not None:
            host_after()
            os.write(want, b"C")
        os.write(want, b"D")


_section_depth = 0
compile_wait_s = 0.0  # this process's wait for the go-ahead after its compiles
start_wait_s = 0.0  # and after its start (host_start_over)


def _go_ahead(fds: list[int]) -> float:
    """``E`` (host work over), then the gate's go-ahead: the seconds waited."""
    want, go = fds
    asked = time.monotonic()
    os.write(want, b"E")
    while (reply := os.read(go, 1)) and reply != b"G":
        pass
    return time.monotonic() - asked


def host_start_over(fds: list[int] | None) -> None:
    """In the request's process: its start (spared by the gate since the host sent the request,
    :meth:`TimingGate.compiling`) is over; the GPU once the gate allows.  A no-op without a gate."""
    global start_wait_s
    if fds:
        start_wait_s += _go_ahead(fds)


@contextmanager
def host_section(fds: list[int] | None, drain):
    """In the request's process: the block works on the host alone (``C`` ... ``E``, then the gate's
    go-ahead), so another evaluation's timing need not stop it.  ``drain`` waits for this process's
    queued GPU work first.  Sections inside a section are one.  A no-op without a gate."""
    global _section_depth, compile_wait_s
    if not fds or _section_depth:
        yield
        return
    drain()
    _section_depth += 1
    os.write(fds[0], b"C")
    try:
        yield
    finally:
        _section_depth -= 1
        compile_wait_s += _go_ahead(fds)


def compile_sections(fds: list[int] | None, drain) -> bool:
    """In the evaluation process of a pipeline: Triton's JIT compiles become host sections that another
    evaluation's timing need not stop (:func:`host_section`).  False where Triton has no ``_do_compile``
    to wrap."""
    from triton.runtime.jit import JITFunction

    original = getattr(JITFunction, "_do_compile", None)
    if not fds or original is None or getattr(original, "_gate_section", False):
        return False

    def in_section(kernel, *args, **kwargs):
        with host_section(fds, drain):
            return original(kernel, *args, **kwargs)

    in_section._gate_section = True
    JITFunction._do_compile = in_section
    return True

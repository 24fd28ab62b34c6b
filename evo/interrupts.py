"""One interrupt, one ``KeyboardInterrupt``: SIGINTs that arrive together count once.

``timeout -s INT`` signals the command's whole process group, and Ray's driver may interrupt the
main thread again when its workers die of that signal.  A second ``KeyboardInterrupt`` raised while
the first unwinds through ``threading``'s internals leaves a condition's lock half released: the
run then ends in ``RuntimeError: release unlocked lock`` and a traceback in place of its resume hint
(seen on an H100, experiments/kernelbench_search.md section 22).  Within ``GRACE_S`` of the first,
further SIGINTs are dropped; one after that (a user's second Ctrl-C at a slow shutdown) interrupts
again.  Where the block ends by an interrupt, the handler stays for the rest of the process's way
out: a SIGINT that came with the first but is handled only after the block (Python runs handlers
between bytecodes, with the handler installed then) would otherwise kill the process by the signal
in place of its exit status 130 (tests/test_interrupt.py, once in CI on 2 cores).
"""
from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager

GRACE_S = 5.0


@contextmanager
def one_interrupt(grace_s: float = GRACE_S):
    """SIGINT raises ``KeyboardInterrupt`` in the main thread, once per ``grace_s`` seconds."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set signal handlers
        return
    last = None  # when the last KeyboardInterrupt was raised

    def handler(signum, frame):
        nonlocal last
        now = time.monotonic()
        if last is not None and now - last < grace_s:
            return
        last = now
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    going_down = False  # the block ended by an interrupt: the handler stays (see the module's text)
    try:
        yield
    except BaseException as exc:
        going_down = interrupted(exc)
        raise
    finally:
        if not going_down:
            signal.signal(signal.SIGINT, previous)


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised while handling, a ``KeyboardInterrupt`` (an interrupt that
    came before :func:`one_interrupt` was in place can still break a lock on its way out)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False

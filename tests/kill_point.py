"""``evo run`` that SIGKILLs itself at a point of its progress: for tests of what a killed run keeps.

    python -m tests.kill_point POINT [evo run overrides ...]

POINT is ``WHEN:WHAT:N``, counted from this process's start:

``inside:METHOD:N``   in the N-th call of ``Archive.METHOD``, after its statements ran and before its
                      transaction commits (so that transaction is lost);
``after:METHOD:N``    when the N-th call of ``Archive.METHOD`` has returned (committed);
``open:archive:1``    when the run opens its archive (run.json written, no database yet);
``evaluating:sandbox:N``  once the N-th evaluation request is in the sandbox worker's pipe (the worker
                      goes on evaluating a candidate for an engine that is gone).

The process kills itself where the point is reached, so where it dies depends on what the run has
done, never on the clock or the machine's speed.  A run that ends before the point exits with 3.
"""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading

from sqlalchemy import event
from sqlalchemy.engine import Engine

from archive import Archive
from evaluator.sandbox import SandboxWorker

NOT_REACHED = 3


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str) -> None:
    when, what, n = point.split(":")
    target, calls, local = int(n), [0], threading.local()

    def reached() -> bool:
        calls[0] += 1
        return calls[0] == target

    if when == "open":
        original_init = Archive.__init__

        def opening(self, *args, **kwargs):
            die()
            original_init(self, *args, **kwargs)

        Archive.__init__ = opening
    elif when in ("inside", "after"):
        original = getattr(Archive, what)

        @functools.wraps(original)
        def wrapped(self, *args, **kwargs):
            outermost = not getattr(local, "writing", False)
            armed = outermost and reached()
            local.writing, local.armed = True, armed and when == "inside"
            try:
                value = original(self, *args, **kwargs)
            finally:
                if outermost:
                    local.writing = local.armed = False
            if armed and when == "after":
                die()
            return value

        setattr(Archive, what, wrapped)

        @event.listens_for(Engine, "commit")
        def before_commit(connection) -> None:  # fires before the database commits
            if getattr(local, "armed", False):
                die()
    elif when == "evaluating":
        original_request, original_read = SandboxWorker.request, SandboxWorker._read_reply

        def request(self, message, timeout_s):
            if self._proc is None or self._proc.poll() is not None:
                self.start()  # its start-up reply is not the evaluation's
            local.evaluating = message.get("kind") == "evaluate"
            return original_request(self, message, timeout_s)

        def read_reply(self, deadline):
            evaluating, local.evaluating = getattr(local, "evaluating", False), False
            if evaluating and reached():
                die()  # the request was written and flushed: the worker is evaluating it
            return original_read(self, deadline)

        SandboxWorker.request, SandboxWorker._read_reply = request, read_reply
    else:
        raise SystemExit(f"unknown kill point {point!r}")


def main() -> int:
    point, overrides = sys.argv[1], sys.argv[2:]
    arm(point)
    from evo.cli import main as evo

    code = evo(["run", *overrides])
    return code or NOT_REACHED


if __name__ == "__main__":
    sys.exit(main())

"""The worker's side of the timing gate (:mod:`evaluator.gate` is the host's): an evaluation's child
writes single bytes on a pipe, the worker passes them to the host as gate messages and the host's
go-ahead back to the child."""
from __future__ import annotations

import json
import os
import sys
import time


class GateRelay:
    """Passes an evaluation's requests for the GPU alone (``W``, then ``D`` when its timing is done)
    and its JIT compiles (``C``, ``E``) to the host's timing gate (:mod:`evaluator.gate`), and the
    host's go-ahead back (``G``)."""

    def __init__(self, send):
        self.send = send
        self.want_fd, self.child_want_fd = os.pipe()
        self.child_go_fd, self.go_fd = os.pipe()
        self.open = True

    def child_fds(self) -> list[int]:
        return [self.child_want_fd, self.child_go_fd]

    def relay(self) -> float:
        """Act on what the child wrote; the seconds spent waiting for the host's go-ahead."""
        began, chunk = time.monotonic(), os.read(self.want_fd, 64)
        if not chunk:  # the child and everything it started closed the pipe
            self.open = False
            return 0.0
        for byte in chunk:
            if byte == ord("W"):
                self._until_go({"gate": "want"})
            elif byte == ord("D"):
                self.send({"gate": "done"})
            elif byte == ord("C"):  # a JIT compile: the gate need not stop this evaluation
                self.send({"gate": "compiling"})
            elif byte == ord("E"):  # compiled: the GPU again once the gate allows
                self._until_go({"gate": "compiled"})
        return time.monotonic() - began

    def _until_go(self, message: dict) -> None:
        self.send(message)
        while (line := sys.stdin.readline()) and json.loads(line).get("gate") != "go":
            pass
        try:
            os.write(self.go_fd, b"G")
        except OSError:  # the child is gone
            pass

    def close_child_ends(self) -> None:
        """In the worker, once the child is forked: the child's ends are the child's alone."""
        os.close(self.child_want_fd)
        os.close(self.child_go_fd)

    def close(self) -> None:
        os.close(self.want_fd)
        os.close(self.go_fd)

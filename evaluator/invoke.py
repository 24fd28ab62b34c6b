"""Every call into a candidate's model, made one way (runs in the sandbox).

A candidate runs in the harness's interpreter, so it can read its callers: the names of the
functions on the stack and their locals.  One that computed honestly whenever a caller looked like
a check and skipped its work otherwise would be scored on calls nobody checked.  So every call
(the correctness checks, the timed calls, the audited batch, the calls checked after timing) is
made on a thread of its own by :class:`Invoker`, whose frames are the same for every call: a loop
that takes the next inputs and calls the model.  What a call is for stays on the harness's thread,
which the candidate's frames do not reach, and which of the timed calls are checked is drawn only
after each has returned (``evaluator.timed_checks``).

Each call also counts the Triton launches that completed during it (``evaluator.guards``), for
every call alike, so a timed call that launches less than the checked ones shows.
"""
from __future__ import annotations

import contextlib
import queue
import threading
from dataclasses import dataclass

import torch

from evaluator.guards import attempted_launches, launch_count


@dataclass
class Outcome:
    """What one call gave: its output, or what it raised; the launches completed and tried during it."""

    output: object = None
    raised: BaseException | None = None
    launched: int = 0
    attempted: int = 0


def _serve(requests: queue.SimpleQueue, replies: queue.SimpleQueue, model, device_index) -> None:
    # The loop every call goes through: its locals are the model, the inputs and the dispatch mode.
    if device_index is not None:
        torch.cuda.set_device(device_index)
    with torch.no_grad():
        while (request := requests.get()) is not None:
            inputs, mode = request
            outcome, launched, attempted = Outcome(), launch_count(), attempted_launches()
            try:
                with mode:
                    outcome.output = model(*inputs)
            except BaseException as exc:  # noqa: BLE001 (handed to the caller's thread, raised there)
                outcome.raised = exc
            outcome.launched = launch_count() - launched
            outcome.attempted = attempted_launches() - attempted
            replies.put(outcome)
            del request, inputs, mode, outcome


class Invoker:
    """Calls ``model`` on a thread of its own (started here, before any call), one call at a time."""

    def __init__(self, model, device: str):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._replies: queue.SimpleQueue = queue.SimpleQueue()
        index = torch.cuda.current_device() if device.startswith("cuda") else None
        self._thread = threading.Thread(target=_serve, args=(self._requests, self._replies, model, index),
                                        daemon=True, name="model")
        self._thread.start()

    def __call__(self, inputs, mode=None) -> Outcome:
        """One call of the model on ``inputs``, under the dispatch ``mode`` if one is given (entered on
        the model's thread: dispatch modes are per thread)."""
        self._requests.put((inputs, mode if mode is not None else contextlib.nullcontext()))
        return self._replies.get()

    def close(self) -> None:
        self._requests.put(None)
        self._thread.join(timeout=5.0)

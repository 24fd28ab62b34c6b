"""torch.compile's time over eager for each task, measured once per task and device
(``evaluator.compile_timing=cached``) on a sandbox worker of its own, beside the pipeline's
evaluations, and applied to each of the task's results (``evaluator.replies.apply_baseline``)."""
from __future__ import annotations

import hashlib
import threading
import time
from typing import Callable

from evaluator.replies import CompileBaseline
from evaluator.sandbox import SandboxWorker

# request(kind, task_name, task_source, worker, **extra) -> the worker's typed reply
Request = Callable[..., CompileBaseline]


class CompileBaselines:
    def __init__(self, compiler: Callable[[], dict | None], request: Request,
                 new_worker: Callable[[], SandboxWorker], gated: bool):
        """``compiler()``: the baseline's ``{"backend", "mode", "timing"}`` (None: no baseline), read
        when asked (settings travel per request);
        ``gated``: evaluations share the GPU (a baseline out of memory beside them is measured again
        with the GPU alone)."""
        self.compiler, self._request, self._new_worker, self._gated = compiler, request, new_worker, gated
        self._ratios: dict[str, dict] = {}  # key -> {"ratio", ...} or {"error"}
        self._locks: dict[str, threading.Lock] = {}
        # key -> the task its measurement began for, and an event set once its entry is in _ratios
        self._asked: dict[str, tuple[str, threading.Event]] = {}
        self._locks_lock = threading.Lock()
        self.worker: SandboxWorker | None = None  # measures the baselines, beside the pipeline
        self.lock = threading.Lock()  # one baseline at a time (each times alone anyway)

    @property
    def cached(self) -> bool:
        """Measured once per task, on a worker of its own (rather than in each evaluation, or not at all)."""
        return (self.compiler() or {}).get("timing") == "cached"

    def made_worker(self) -> SandboxWorker:
        """The baseline's worker, made now if it was not (under :attr:`lock`)."""
        self.worker = self.worker or self._new_worker()
        return self.worker

    def key(self, task_source: str) -> str | None:
        """The cache key of a task's baseline where baselines are cached, else None."""
        if not self.cached:
            return None
        c = self.compiler()
        return hashlib.sha256(f"{c['backend']}:{c['mode']}:{task_source}".encode()).hexdigest()

    def known(self, key: str) -> bool:
        return key in self._ratios

    def _asked_for(self, key: str, task_name: str) -> threading.Event:
        """Note that the task's baseline is asked (under ``_locks_lock``): the event set once it is known."""
        return self._asked.setdefault(key, (task_name, threading.Event()))[1]

    def measured(self, task_name: str, task_source: str) -> dict | None:
        """The task's baseline, measured now if it was not (the task's evaluations that end meanwhile
        wait for it); None where baselines are not cached."""
        key = self.key(task_source)
        if key is None:
            return None
        with self._locks_lock:
            lock = self._locks.setdefault(key, threading.Lock())
            done = self._asked_for(key, task_name)
        with lock:
            if key not in self._ratios:
                try:
                    with self.lock:
                        worker = self.made_worker()
                        reply = self._request("compile_baseline", task_name, task_source, worker=worker)
                        if self._gated and reply.out_of_memory:  # beside other evaluations: again, alone
                            reply = self._request("compile_baseline", task_name, task_source, worker=worker,
                                                  exclusive=True)
                except Exception as exc:  # noqa: BLE001 (a worker closed under it, say): known, not awaited
                    reply = CompileBaseline(error=f"the torch.compile baseline was not measured: "
                                                  f"{type(exc).__name__}: {exc}")
                self._ratios[key] = reply.entry()
                done.set()
            return self._ratios[key]

    def prefetch(self, task_name: str, task_source: str) -> None:
        """Start measuring the task's baseline as its first evaluation is asked, not once that one is
        timed: inductor's compile (host work, spared by the gate) then overlaps the first candidates'
        start and checks instead of holding their results (and their callers' slots) for 6-17 s."""
        key = self.key(task_source)
        with self._locks_lock:
            if key is None or key in self._asked:  # under way, or measured
                return
            self._asked_for(key, task_name)
        threading.Thread(target=self.measured, args=(task_name, task_source), daemon=True,
                         name=f"baseline-{task_name}").start()

    def settled(self, timeout_s: float) -> dict[str, dict]:
        """Every task's baseline asked, ``{task name: {"ratio"} or {"error"}}``, once those still
        measured have ended (at most ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        with self._locks_lock:
            asked = [(key, task_name, done) for key, (task_name, done) in self._asked.items()]
        settled = {}
        for key, task_name, done in asked:
            if done.wait(max(0.0, deadline - time.monotonic())):
                settled[task_name] = self._ratios[key]
        return settled

    def entries(self) -> dict[str, dict]:
        """The baselines known so far, by key."""
        return dict(self._ratios)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()

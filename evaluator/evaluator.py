"""The evaluator: scores one candidate kernel of one task, in a sandbox."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import queue
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from evaluator import plausibility
from evaluator.gate import TimingGate
from evaluator.preparation import Preparation, prepare_tasks
from evaluator.reply import apply_baseline, out_of_memory, result_of
from evaluator.result import EvalResult
from evaluator.sandbox import SandboxWorker
# The settings live in evaluator.settings; named here too, where configs and callers find them.
from evaluator.settings import TOLERANCES, EvaluatorSettings, TimingSettings, evaluation_slots

__all__ = ["TOLERANCES", "Evaluator", "EvaluatorSettings", "TimingSettings", "evaluation_slots"]


class Evaluator:
    """Evaluates candidates in sandbox worker processes on one device: ``settings.pipeline`` of them at
    once, each timed alone (:meth:`evaluate` may be called from ``slots`` threads: the others wait
    for a worker)."""

    def __init__(self, settings: EvaluatorSettings, device: str, cuda_index: int | None = None,
                 scratch_root: str | None = None):
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be resolved to cpu or cuda, not {device!r}")
        self.settings = settings = settings.on(device)  # as the run's start-up passed them (pipeline decided)
        self.device = device
        self.depth = settings.pipeline
        self.slots = evaluation_slots(self.depth)  # callers of evaluate at once (islands.backend)
        self._cuda_index, self._scratch_root = cuda_index, scratch_root
        self.gate = TimingGate() if self.depth > 1 else None
        shared = settings.cache_dir is None and settings.share_compile_cache and self.depth > 1
        self.compile_cache = tempfile.mkdtemp(prefix="evo-compile-cache-", dir=scratch_root) if shared else None
        self.workers = [self._new_worker(self.compile_cache) for _ in range(self.depth)]
        self.worker = self.workers[0]  # checks and seeds at start-up
        self._idle: queue.SimpleQueue[SandboxWorker] = queue.SimpleQueue()
        self._draining = threading.Lock()  # held to take a worker, and to take them all (_device_to_itself)
        for worker in self.workers:
            self._idle.put(worker)
        self._baselines: dict[str, dict] = {}  # (compiler settings, task source) hash -> the baseline's ratio
        self._baseline_locks: dict[str, threading.Lock] = {}
        # key -> the task its measurement began for, and an event set once its entry is in _baselines
        self._baseline_asked: dict[str, tuple[str, threading.Event]] = {}
        self._locks_lock = threading.Lock()
        self._baseline_worker: SandboxWorker | None = None  # measures the baselines, beside the pipeline
        self._baseline_worker_lock = threading.Lock()
        self._peaks: dict | None = None  # this GPU's measured roofline peaks, once measured
        self._peaks_lock = threading.Lock()
        self._peaks_failures = 0  # out of memory beside other evaluations, say: tried again, three times
        self._warming: list[threading.Thread] = []
        if settings.warm_start if settings.warm_start is not None else device == "cuda":
            self._warm_start()

    def _warm_start(self) -> None:
        """Start every worker (the pipeline's, and the baseline's if one will be measured), each in a
        thread, and try its candidates' containment (``settle``: up to three trial children, CUDA
        started in each on a GPU, 0.7 s on an H100 host), then measure the GPU's roofline peaks on the
        first free one (alone, under the gate): while the run checks its tasks, not in the first
        evaluations (EvaluatorSettings.warm_start)."""
        if self._baseline_cached():
            with self._baseline_worker_lock:
                self._made_baseline_worker()
        measure_peaks = self.gate is not None and self.settings.roofline_peaks is None

        def warm(worker: SandboxWorker, peaks: bool) -> None:
            try:
                worker.ensure_started()
                self._request("settle", "", "", worker=worker)
                if peaks:
                    with self._draining:
                        taken = self._idle.get()
                    try:
                        self._roofline_peaks(taken)
                    finally:
                        self._idle.put(taken)
            except Exception:  # noqa: BLE001 (the first request starts it again, and says why it fails)
                pass

        for i, worker in enumerate([*self.workers, *filter(None, [self._baseline_worker])]):
            self._warming.append(threading.Thread(target=warm, args=(worker, measure_peaks and i == 0),
                                                  daemon=True, name=f"evo-warm-{i}"))
            self._warming[-1].start()

    def _new_worker(self, cache_dir: str | None = None) -> SandboxWorker:
        """A sandbox worker on this evaluator's device (started at its first request), a member of the
        timing gate if there is one: stopped while another evaluation times, like every worker here.
        Its Triton cache: ``evaluator.cache_dir``, else ``cache_dir``, else one of its own."""
        worker = SandboxWorker(device=self.device, cuda_index=self._cuda_index, scratch_root=self._scratch_root,
                               cache_dir=self.settings.cache_dir or cache_dir)
        if self.gate:
            worker.gate = self.gate
            self.gate.join(worker)
        return worker

    def _request(self, kind: str, task_name: str, task_source: str, *, worker: SandboxWorker | None = None,
                 **extra) -> dict:
        timing = self.settings.timing if self.device == "cuda" else self.settings.cpu_timing
        message = {
            "kind": kind, "task_name": task_name, "task_source": task_source,
            "device": "cuda" if self.device == "cuda" else "cpu",
            "seeds": list(self.settings.seeds), "cpu_max_numel": self.settings.cpu_max_numel,
            "timing": dataclasses.asdict(timing),  # every TimingSettings field reaches the harness
            "timed_checks": {"samples": self.settings.timed_samples,
                             "triton_share_min": self.settings.triton_share_min} if self.settings.verify_timed else None,
            "noise_floor": self.settings.noise_floor, "roofline_limit": self.settings.roofline_limit,
            "roofline_peaks": self.settings.roofline_peaks, "memory_limit_mb": self.settings.memory_limit_mb,
            "gpu_memory_fraction": self.settings.gpu_memory_fraction,
            "isolate_network": self.settings.isolate_network, "containment": self.settings.containment,
            "compile_baseline": self._compile_baseline(), "time_shapes": self.settings.time_shapes,
            "tolerance": TOLERANCES[self.settings.tolerance],
            **extra,
        }
        reply = (worker or self.worker).request(message, self.settings.timeout_s)
        if kind != "evaluate" and ("sandbox" in reply or "harness_error" in reply):
            what = {"check_task": "the reference", "compile_seed": "deriving the seed",
                    "roofline_peaks": "measuring the GPU's peaks",
                    "settle": "trying the candidates' containment"}.get(kind, "the torch.compile baseline")
            if reply.get("sandbox") == "timeout":
                error = f"{what} did not finish within evaluator.timeout_s={self.settings.timeout_s:g} s"
            else:
                error = reply.get("reason") or reply.get("harness_error")
            return {"ok": False, "stage": reply.get("sandbox", "crashed"), "error": error,
                    "traceback": reply.get("log", "")}
        return reply

    def _compile_baseline(self) -> dict | None:
        wanted = self.settings.compile_baseline
        if wanted is False or (wanted is None and self.device != "cuda"):
            return None
        return {"backend": self.settings.compile_backend, "mode": self.settings.compile_mode,
                "timing": self.settings.compile_timing}

    def _cached_baseline(self, task_name: str, task_source: str) -> dict | None:
        """The task's torch.compile baseline (``compile_timing=cached``): measured once per task and
        device by a request of its own, on a worker of its own, so that the pipeline's workers go on
        evaluating meanwhile; the task's evaluations that end meanwhile wait for it."""
        key = self._baseline_key(task_source)
        if key is None:
            return None
        with self._locks_lock:
            lock = self._baseline_locks.setdefault(key, threading.Lock())
            done = self._asked_baseline(key, task_name)
        with lock:
            if key not in self._baselines:
                try:
                    with self._baseline_worker_lock:  # one baseline at a time: each times alone anyway
                        worker = self._made_baseline_worker()
                        reply = self._request("compile_baseline", task_name, task_source, worker=worker)
                        if self.gate and reply.get("out_of_memory"):  # beside other evaluations: again, alone
                            reply = self._request("compile_baseline", task_name, task_source, worker=worker,
                                                  exclusive=True)
                except Exception as exc:  # noqa: BLE001 (a worker closed under it, say): known, not awaited
                    reply = {"error": f"the torch.compile baseline was not measured: {type(exc).__name__}: {exc}"}
                if "ratio" not in reply:
                    reply = {"error": reply.get("error") or "the torch.compile baseline gave no ratio"}
                self._baselines[key] = reply
                done.set()
            return self._baselines[key]

    def _asked_baseline(self, key: str, task_name: str) -> threading.Event:
        """Note that the task's baseline is asked (under ``_locks_lock``): the event set once it is known."""
        return self._baseline_asked.setdefault(key, (task_name, threading.Event()))[1]

    def _baseline_cached(self) -> bool:
        """Whether the torch.compile baseline is measured once per task (``compile_timing=cached``), on
        a worker of its own, rather than in each evaluation or not at all."""
        return (self._compile_baseline() or {}).get("timing") == "cached"

    def _made_baseline_worker(self) -> SandboxWorker:
        """The baseline's worker, made now if it was not (under ``_baseline_worker_lock``)."""
        self._baseline_worker = self._baseline_worker or self._new_worker()
        return self._baseline_worker

    def _baseline_key(self, task_source: str) -> str | None:
        """The cache key of a task's torch.compile baseline (``compile_timing=cached``), else None."""
        if not self._baseline_cached():
            return None
        settings = self._compile_baseline()
        return hashlib.sha256(f"{settings['backend']}:{settings['mode']}:{task_source}".encode()).hexdigest()

    def _prefetch_baseline(self, task_name: str, task_source: str) -> None:
        """Start measuring the task's baseline as its first evaluation is asked, not once that one is
        timed: inductor's compile (host work, spared by the gate) then overlaps the first candidates'
        start and checks instead of holding their results (and their callers' slots) for 6-17 s."""
        key = self._baseline_key(task_source)
        with self._locks_lock:
            if key is None or key in self._baseline_asked:  # under way, or measured
                return
            self._asked_baseline(key, task_name)
        threading.Thread(target=self._cached_baseline, args=(task_name, task_source), daemon=True,
                         name=f"baseline-{task_name}").start()

    def _roofline_peaks(self, worker: SandboxWorker) -> dict | None:
        """Configured peaks, else this GPU's, measured once by a request of its own on ``worker``."""
        if self.settings.roofline_peaks or self.device != "cuda":
            return self.settings.roofline_peaks
        with self._peaks_lock:
            if self._peaks is None:
                reply = self._request("roofline_peaks", "", "", worker=worker)
                self._peaks_failures += "bytes_per_s" not in reply
                if "bytes_per_s" in reply or self._peaks_failures >= 3:  # else tried again next time
                    self._peaks = reply if "bytes_per_s" in reply else {}  # {}: no roofline fraction
            return self._peaks or None

    def evaluate(self, task_name: str, task_source: str, candidate_source: str,
                 race_bar: float | None = None, late_baseline: bool = False) -> EvalResult:
        """Score one candidate; ``race_bar`` (its parent's speedup) lets a clearly slower child keep
        a short timing round (``evaluator.race``).  With ``late_baseline`` (a search) the result does
        not wait for its task's torch.compile baseline while that is still measured: its extra says
        ``compile_baseline: "pending"`` and the task's later results carry ``compile_baseline_ratio``
        (or :meth:`settled_baselines` gives it) to fill it in, since ``speedup_vs_compiled`` is a
        figure to report, not the search's fitness.  Waiting held the caller's slot: a task's first
        results, and the search behind them, waited 5-16 s for a compile on KernelBench problems."""
        asked = time.monotonic()
        race = {"bar": race_bar, "reps": self.settings.race_reps, "margin": self.settings.race_margin} \
            if self.settings.race and race_bar else None
        if self.settings.prefetch_baseline:
            self._prefetch_baseline(task_name, task_source)
        with self._draining:
            worker = self._idle.get()
        baseline_s, entry, oom_s = 0.0, None, 0.0
        began = time.monotonic()  # waiting for a worker (the slot beyond the pipeline) is queued_s
        try:
            peaks = {"roofline_peaks": self._roofline_peaks(worker)}

            def attempt(**alone) -> dict:
                return self._request("evaluate", task_name, task_source, worker=worker,
                                     candidate_source=candidate_source, race=race, **peaks, **alone)

            reply = attempt()
            if self.gate and out_of_memory(reply):  # beside other evaluations: again, the GPU alone
                oom_s = time.monotonic() - began
                reply = attempt(exclusive=True)
        finally:
            self._idle.put(worker)
        if self.gate and len(self.workers) > 1 and out_of_memory(reply):
            # Still out of memory: the evaluations stopped while it ran kept their memory (six 6.4 GB
            # problems in flight filled an H100).  Once more with the device to itself; out of memory
            # then, it is the candidate's own.
            with self._device_to_itself():
                oom_s = time.monotonic() - began
                reply = attempt(exclusive=True)
        pending = False
        if reply.get("ref_runtime_ms"):  # timed: its task's torch.compile baseline, measured if first
            measured = time.monotonic()
            key = self._baseline_key(task_source) if late_baseline else None
            if key is not None and key not in self._baselines:
                self._prefetch_baseline(task_name, task_source)  # under way, or started now
                pending = key not in self._baselines  # it may have just ended
            if not pending:
                entry = self._cached_baseline(task_name, task_source)
            baseline_s = time.monotonic() - measured
        result = result_of(reply, entry)
        over = plausibility.over_bound(result, entry, self.settings.plausible_speedup)
        if over is not None:
            result = self._reverify(task_name, task_source, candidate_source, result, over, entry, peaks)
        if "sandbox" not in reply and "harness_error" not in reply:
            if pending:
                result.extra["compile_baseline"] = "pending"
            elif entry and "ratio" in entry and late_baseline:
                result.extra["compile_baseline_ratio"] = entry["ratio"]  # for the task's results before it
        # The harness times its own phases; what it cannot see (starting the child, the request and
        # the reply, a worker started again) is the host's share.
        phases = result.extra.setdefault("phases", {})
        total = time.monotonic() - began
        if baseline_s > 0.05:  # this evaluation waited for its task's baseline, measured after its timing
            phases["baseline_compile_s"] = phases.get("baseline_compile_s", 0.0) + baseline_s
        if oom_s:  # the attempts that ran out of GPU memory beside other evaluations (then tried alone)
            phases["oom_retry_s"] = oom_s
        phases["host_s"] = max(0.0, total - result.wall_s - baseline_s - oom_s)
        phases["total_s"] = total
        if began - asked > 0.01:
            phases["queued_s"] = began - asked
        return result

    def _reverify(self, task_name: str, task_source: str, candidate_source: str, first: EvalResult, over: float,
                  baseline: dict | None, peaks: dict) -> EvalResult:
        """An implausibly fast result evaluated again (``evaluator.plausibility``), on a free worker."""
        timing = self.settings.timing if self.device == "cuda" else self.settings.cpu_timing
        fresh = plausibility.reverify_request(list(self.settings.seeds), dataclasses.asdict(timing))
        with self._draining:
            worker = self._idle.get()
        try:
            reply = self._request("evaluate", task_name, task_source, worker=worker,
                                  candidate_source=candidate_source, **peaks, **fresh)
        finally:
            self._idle.put(worker)
        second = result_of(reply, baseline)
        second.extra.setdefault("phases", {})["reverify_s"] = second.wall_s
        second.wall_s += first.wall_s  # both in the sandbox
        return plausibility.reverified(first, second, over, self.settings.plausible_speedup)

    def settled_baselines(self, timeout_s: float = 600.0) -> dict[str, dict]:
        """Every task's torch.compile baseline asked of this evaluator, ``{task name: {"ratio"} or
        {"error"}}``, once those still measured have ended (at most ``timeout_s``): for the results
        that came back before theirs (``late_baseline``)."""
        deadline = time.monotonic() + timeout_s
        with self._locks_lock:
            asked = [(key, task_name, done) for key, (task_name, done) in self._baseline_asked.items()]
        settled = {}
        for key, task_name, done in asked:
            if done.wait(max(0.0, deadline - time.monotonic())):
                settled[task_name] = self._baselines[key]
        return settled

    def check_task(self, task_name: str, task_source: str) -> dict:
        """Run the task's reference alone: ``{"ok": bool, "error"?, "stage"?, "warnings"?, "memory"?}``."""
        return self._request("check_task", task_name, task_source)

    def compile_seed(self, task_name: str, task_source: str) -> dict:
        """A seed kernel from torch.compile's Triton: ``{"ok": True, "source"}`` or ``{"ok": False, "error"}``."""
        return self._request("compile_seed", task_name, task_source)

    @property
    def prepare_workers(self) -> int:
        """Sandbox workers that prepare tasks at once: on a GPU one per two CPU cores, at most 8."""
        if self.settings.prepare_workers:
            return self.settings.prepare_workers
        return max(1, min(8, (os.cpu_count() or 2) // 2)) if self.device == "cuda" else 1

    def prepare(self, tasks: list[Preparation], parallel: int = 1) -> dict[str, dict]:
        """Check the references of ``tasks`` and derive the seeds they ask for, ``parallel`` at a time
        (each in a sandbox worker of its own): ``{name: {"check": reply, "seed": reply | None}}``."""
        return dict(self.prepare_stream(tasks, parallel))

    def prepare_stream(self, tasks: list[Preparation], parallel: int | None = None) -> Iterator[tuple[str, dict]]:
        """:meth:`prepare`, each task's ``(name, outcome)`` yielded as soon as it is known (``parallel``:
        None for :attr:`prepare_workers`).  Its workers are its own, members of the timing gate while
        they work: a search may go on beside them (their GPU work stopped while a candidate times,
        their start and inductor's compile spared)."""
        made: list[SandboxWorker] = []
        outcomes: queue.SimpleQueue = queue.SimpleQueue()
        done = object()

        def make_worker() -> SandboxWorker:
            made.append(self._new_worker())
            return made[-1]

        def request(worker: SandboxWorker, kind: str, name: str, source: str) -> dict:
            return self._request(kind, name, source, worker=worker)

        def run() -> None:
            end: object = done
            try:
                prepare_tasks(request, tasks, parallel or self.prepare_workers, make_worker,
                              on_outcome=lambda name, outcome: outcomes.put((name, outcome)),
                              alone=self._device_to_itself)
            except BaseException as exc:  # noqa: BLE001 (raised again in the caller's thread)
                end = exc
            finally:
                for worker in made:  # closed before the end is told: none outlives the stream
                    worker.close()
                    if self.gate:
                        self.gate.leave(worker)
                outcomes.put(end)

        threading.Thread(target=run, daemon=True, name="evo-prepare").start()
        while (item := outcomes.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item

    @contextmanager
    def _device_to_itself(self):
        """Every evaluation of this device finished and none started, nor a baseline, until the block
        ends (a task that ran out of GPU memory beside a search, prepared again: a stopped
        evaluation would still hold its memory)."""
        with self._draining:  # evaluations not yet started wait here
            held = [self._idle.get() for _ in self.workers]
        try:
            with self._baseline_worker_lock:
                yield
        finally:
            for worker in held:
                self._idle.put(worker)

    def wait_warm(self) -> None:
        """Returns once the warm start is over: every worker started and settled, the peaks measured
        (at once without a warm start).  A benchmark starts its clock here, as a run's first
        evaluations come after its task checks, which the warm start runs beside."""
        for thread in self._warming:
            thread.join()

    def close(self) -> None:
        self.wait_warm()  # a worker started after its close would outlive the evaluator
        for worker in [*self.workers, *([self._baseline_worker] if self._baseline_worker else [])]:
            worker.close()
        if self.compile_cache:
            shutil.rmtree(self.compile_cache, ignore_errors=True)

"""The evaluator: scores one candidate kernel of one task, in a sandbox."""
from __future__ import annotations

import dataclasses
import os
import queue
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from evaluator import plausibility
from evaluator.baseline_cache import CompileBaselines
from evaluator.gate import TimingGate
from evaluator.messages import WorkerRequest
from evaluator.peaks import RooflinePeaks
from evaluator.pool import WorkerPool
from evaluator.preparation import Preparation, PreparedTask, prepare_tasks
from evaluator.replies import (DerivedSeed, EvaluationReply, TaskCheck, WorkerFailure, out_of_memory, read,
                               result_of)
from evaluator.result import EvalResult
from evaluator.sandbox import SandboxWorker
# The settings live in evaluator.settings; named here too, where configs and callers find them.
from evaluator.settings import TOLERANCES, EvaluatorSettings, TimingSettings, evaluation_slots

__all__ = ["TOLERANCES", "Evaluator", "EvaluatorSettings", "TimingSettings", "evaluation_slots"]


class Evaluator:
    """Evaluates candidates in sandbox worker processes on one device: ``settings.pipeline`` of them at
    once, each timed alone (:meth:`evaluate` may be called from ``slots`` threads: the others wait
    for a worker).  Its parts: the workers (:class:`~evaluator.pool.WorkerPool`), the tasks'
    torch.compile baselines (:class:`~evaluator.baseline_cache.CompileBaselines`) and the GPU's
    roofline peaks (:class:`~evaluator.peaks.RooflinePeaks`); this class builds the requests and
    reads the replies."""

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
        self.pool = WorkerPool(lambda: self._new_worker(self.compile_cache), self.depth)
        self.workers = self.pool.workers
        self.worker = self.workers[0]  # checks and seeds at start-up
        # (settings and requests looked up when used: settings travel per request, and a test may
        # stand in for the worker's answers, ``_send``)
        self.baselines = CompileBaselines(self._compile_baseline, lambda *a, **k: self._request(*a, **k),
                                          self._new_worker, gated=self.gate is not None)
        self.peaks = RooflinePeaks(lambda: self.settings.roofline_peaks, device,
                                   lambda worker: self._request("roofline_peaks", "", "", worker=worker))
        self._warming: list[threading.Thread] = []
        self._closed = False  # no request is sent once set: an evaluation under way ends with its worker
        if settings.warm_start if settings.warm_start is not None else device == "cuda":
            self._warm_start()

    def _warm_start(self) -> None:
        """Start every worker (the pipeline's, and the baseline's if one will be measured), each in a
        thread, and try its candidates' containment (``settle``: up to three trial children, CUDA
        started in each on a GPU, 0.7 s on an H100 host), then measure the GPU's roofline peaks on the
        first free one (alone, under the gate): while the run checks its tasks, not in the first
        evaluations (EvaluatorSettings.warm_start)."""
        if self.baselines.cached:
            with self.baselines.lock:
                self.baselines.made_worker()
        measure_peaks = self.gate is not None and self.settings.roofline_peaks is None

        def warm(worker: SandboxWorker, peaks: bool) -> None:
            try:
                worker.ensure_started()
                self._request("settle", "", "", worker=worker)
                if peaks:
                    with self.pool.one() as taken:
                        self.peaks.get(taken)
            except Exception:  # noqa: BLE001 (the first request starts it again, and says why it fails)
                pass

        for i, worker in enumerate([*self.workers, *filter(None, [self.baselines.worker])]):
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
                 **extra):
        """One request to a sandbox worker, its reply read into its kind's type (``evaluator.replies``)."""
        return read(kind, self._send(kind, task_name, task_source, worker=worker, **extra), self.settings.timeout_s)

    def _send(self, kind: str, task_name: str, task_source: str, *, worker: SandboxWorker | None = None,
              **extra) -> dict:
        """The request on the wire, and the worker's answer as it came (a JSON object)."""
        if self._closed:  # closed under an evaluation (a run stopped mid-search): no worker started again
            return {"sandbox": "closed", "reason": "the evaluator was closed before this request"}
        timing = self.settings.timing if self.device == "cuda" else self.settings.cpu_timing
        request = WorkerRequest(
            kind=kind, task_name=task_name, task_source=task_source,
            device="cuda" if self.device == "cuda" else "cpu",
            seeds=list(self.settings.seeds), cpu_max_numel=self.settings.cpu_max_numel,
            timing=dataclasses.asdict(timing),  # every TimingSettings field reaches the harness
            timed_checks={"samples": self.settings.timed_samples,
                          "triton_share_min": self.settings.triton_share_min} if self.settings.verify_timed else None,
            noise_floor=self.settings.noise_floor, roofline_limit=self.settings.roofline_limit,
            roofline_peaks=self.settings.roofline_peaks, memory_limit_mb=self.settings.memory_limit_mb,
            gpu_memory_fraction=self.settings.gpu_memory_fraction,
            isolate_network=self.settings.isolate_network, containment=self.settings.containment,
            compile_baseline=self._compile_baseline(), time_shapes=self.settings.time_shapes,
            tolerance=TOLERANCES[self.settings.tolerance], extra=extra)
        return (worker or self.worker).request(request.as_message(), self.settings.timeout_s)

    def _compile_baseline(self) -> dict | None:
        wanted = self.settings.compile_baseline
        if wanted is False or (wanted is None and self.device != "cuda"):
            return None
        return {"backend": self.settings.compile_backend, "mode": self.settings.compile_mode,
                "timing": self.settings.compile_timing}

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
            self.baselines.prefetch(task_name, task_source)
        worker = self.pool.take()
        baseline_s, entry, oom_s = 0.0, None, 0.0
        began = time.monotonic()  # waiting for a worker (the slot beyond the pipeline) is queued_s
        try:
            peaks = {"roofline_peaks": self.peaks.get(worker)}

            def attempt(**alone) -> EvaluationReply:
                return self._request("evaluate", task_name, task_source, worker=worker,
                                     candidate_source=candidate_source, race=race, **peaks, **alone)

            reply = attempt()
            if self.gate and out_of_memory(reply):  # beside other evaluations: again, the GPU alone
                oom_s = time.monotonic() - began
                reply = attempt(exclusive=True)
        finally:
            self.pool.give(worker)
        if self.gate and len(self.workers) > 1 and out_of_memory(reply):
            # Still out of memory: the evaluations stopped while it ran kept their memory (six 6.4 GB
            # problems in flight filled an H100).  Once more with the device to itself; out of memory
            # then, it is the candidate's own.
            with self._device_to_itself():
                oom_s = time.monotonic() - began
                reply = attempt(exclusive=True)
        pending = False
        if isinstance(reply, EvalResult) and reply.ref_runtime_ms:  # timed: its task's torch.compile baseline, measured if first
            measured = time.monotonic()
            key = self.baselines.key(task_source) if late_baseline else None
            if key is not None and not self.baselines.known(key):
                self.baselines.prefetch(task_name, task_source)  # under way, or started now
                pending = not self.baselines.known(key)  # it may have just ended
            if not pending:
                entry = self.baselines.measured(task_name, task_source)
            baseline_s = time.monotonic() - measured
        result = result_of(reply, entry)
        over = plausibility.over_bound(result, entry, self.settings.plausible_speedup)
        if over is not None:
            result = self._reverify(task_name, task_source, candidate_source, result, over, entry, peaks)
        if not isinstance(reply, WorkerFailure):
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
        with self.pool.one() as worker:
            reply = self._request("evaluate", task_name, task_source, worker=worker,
                                  candidate_source=candidate_source, **peaks, **fresh)
        second = result_of(reply, baseline)
        second.extra.setdefault("phases", {})["reverify_s"] = second.wall_s
        second.wall_s += first.wall_s  # both in the sandbox
        return plausibility.reverified(first, second, over, self.settings.plausible_speedup)

    def settled_baselines(self, timeout_s: float = 600.0, ask: dict[str, str] | None = None) -> dict[str, dict]:
        """Every task's torch.compile baseline asked of this evaluator, ``{task name: {"ratio"} or
        {"error"}}``, once those still measured have ended (at most ``timeout_s``): for the results
        that came back before theirs (``late_baseline``).  ``ask`` (``{task name: source}``): tasks
        to measure now if this evaluator has not, so that none of their results stays without one."""
        for task_name, task_source in (ask or {}).items():
            self.baselines.prefetch(task_name, task_source)
        return self.baselines.settled(timeout_s)

    def check_task(self, task_name: str, task_source: str) -> TaskCheck:
        """Run the task's reference alone on every admissible shape set."""
        return self._request("check_task", task_name, task_source)

    def compile_seed(self, task_name: str, task_source: str) -> DerivedSeed:
        """A seed kernel from torch.compile's Triton, or why none came."""
        return self._request("compile_seed", task_name, task_source)

    @property
    def prepare_workers(self) -> int:
        """Sandbox workers that prepare tasks at once: on a GPU one per two CPU cores, at most 8."""
        if self.settings.prepare_workers:
            return self.settings.prepare_workers
        return max(1, min(8, (os.cpu_count() or 2) // 2)) if self.device == "cuda" else 1

    def prepare(self, tasks: list[Preparation], parallel: int = 1) -> dict[str, PreparedTask]:
        """Check the references of ``tasks`` and derive the seeds they ask for, ``parallel`` at a time
        (each in a sandbox worker of its own), by name."""
        return dict(self.prepare_stream(tasks, parallel))

    def prepare_stream(self, tasks: list[Preparation], parallel: int | None = None) -> Iterator[tuple[str, PreparedTask]]:
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

        def request(worker: SandboxWorker, kind: str, name: str, source: str) -> TaskCheck | DerivedSeed:
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
        with self.pool.all(), self.baselines.lock:
            yield

    def wait_warm(self) -> None:
        """Returns once the warm start is over: every worker started and settled, the peaks measured
        (at once without a warm start).  A benchmark starts its clock here, as a run's first
        evaluations come after its task checks, which the warm start runs beside."""
        for thread in self._warming:
            thread.join()

    def close(self) -> None:
        self._closed = True
        self.wait_warm()  # a worker started after its close would outlive the evaluator
        self.pool.close()
        self.baselines.close()
        if self.compile_cache:
            shutil.rmtree(self.compile_cache, ignore_errors=True)

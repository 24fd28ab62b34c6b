"""The evaluator: scores one candidate kernel of one task, in a sandbox."""
from __future__ import annotations

import hashlib
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

from evaluator.containment import MODES
from evaluator.gate import TimingGate
from evaluator.preparation import Preparation, prepare_tasks
from evaluator.result import EvalResult, Status, trim
from evaluator.sandbox import SandboxWorker


@dataclass(frozen=True)
class TimingSettings:
    warmup: int = 3
    warmup_s: float = 0.0  # and at least this long (GPU clocks ramp up after idling)
    reps: int = 100
    budget_s: float = 2.0  # stop repeating once this much time went into timing
    batch: int = 8  # GPU: pairs of calls queued between synchronisations (1: synchronise around each)
    input_sets: int = 3  # timed calls take these many input sets (seeded apart, allocated apart) in turn
    input_sets_mb: float = 256.0  # at most this much for the extra sets (beyond it: 2 sets)


# Tolerances where a task sets no ATOL/RTOL: ``strict`` keeps evaluator.compare's per-dtype defaults
# (fp32 1e-4, as KernelBench's current harness); ``kernelbench`` is atol = rtol = 1e-2 for every dtype,
# as in the KernelBench paper's published fast_p figures (versions 0 and 0.1).
TOLERANCES = {"strict": None, "kernelbench": 1e-2}


@dataclass(frozen=True)
class EvaluatorSettings:
    """How candidates are checked and timed (``conf/evaluator/*.yaml``)."""

    device: str = "auto"  # auto | cpu | cuda
    seeds: tuple[int, ...] = (0, 1)
    timeout_s: float = 120.0
    cpu_max_numel: int = 1 << 16  # on the CPU, larger shape sets are skipped
    timing: TimingSettings = field(default_factory=lambda: TimingSettings(warmup_s=0.2))
    cpu_timing: TimingSettings = field(default_factory=lambda: TimingSettings(warmup=1, reps=3, budget_s=1.0))
    workers: int | None = None  # None: one per GPU, or one on the CPU
    cache_dir: str | None = None
    noise_floor: float = 0.01  # speedups closer than this (relative) are not told apart
    roofline_limit: float = 1.2  # beyond this fraction of the roofline a result is re-verified
    roofline_peaks: dict | None = None  # {bytes_per_s, flops_per_s}; None: measured on each GPU
    compile_baseline: bool | None = None  # time torch.compile of the reference; None: on GPUs only
    compile_backend: str = "inductor"
    compile_mode: str | None = None
    compile_timing: str = "cached"  # cached: a ratio per task and device | live: timed interleaved with each candidate
    # The task's torch.compile baseline (cached) measured from its first evaluation's request, beside
    # it, instead of after that evaluation's timing.
    prefetch_baseline: bool = True
    # Evaluations in flight per device: while one is timed (alone on the GPU: evaluator.gate), the
    # others start and compile (host work, spared by the gate), load and are checked.  None: 3 on a
    # GPU (KernelBench set, H100: 17.2 against 15.0 with 2 and 13.1 with 1 evaluations per GPU-minute
    # in round 5, 16.4 against 15.6 with 2 in round 7 of throughput_bench.md; each in flight holds its
    # own GPU memory, and one that runs out beside the others is evaluated again alone), 1 on the CPU.
    pipeline: int | None = None
    # Racing: a child is first timed for race_reps repetitions against eager; one clearly slower
    # than its parent (by race_margin, beyond its noise) keeps that measurement, the others are
    # timed in full.  What each got is in its result (extra.timing_round).
    race: bool = True
    race_reps: int = 10
    race_margin: float = 0.1
    time_shapes: str = "largest"  # largest | all: time every shape set too (per-shape speedups, for export buckets)
    memory_limit_mb: int = 32768  # host memory (RSS) of one evaluation; its process group is killed beyond
    gpu_memory_fraction: float = 0.9  # of the GPU, for one evaluation's allocations
    isolate_network: bool = True  # a private network namespace for candidates, where the OS allows
    containment: str = "auto"  # auto: namespaces where the OS allows, else Landlock | landlock | off
    prepare_workers: int | None = None  # sandbox workers per device checking references and deriving seeds
    tolerance: str = "strict"  # strict: per-dtype defaults (fp32 1e-4) | kernelbench: atol = rtol = 1e-2
    # The timed calls held to the checks' rules (evaluator.timed_checks): outputs checked, a sample
    # guarded, and on a GPU this share of one profiled batch's device time in the candidate's own kernels.
    verify_timed: bool = True
    timed_samples: int = 3  # timed calls guarded, besides the first and one after the last
    triton_share_min: float = 0.9

    def __post_init__(self):
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"evaluator.device must be auto, cpu or cuda, not {self.device!r}")
        if not self.seeds:
            raise ValueError("evaluator.seeds needs at least one seed")
        if self.compile_timing not in ("live", "cached"):
            raise ValueError(f"evaluator.compile_timing must be live or cached, not {self.compile_timing!r}")
        if self.containment not in MODES:
            raise ValueError(f"evaluator.containment must be one of {', '.join(MODES)}, not {self.containment!r}")
        if self.tolerance not in TOLERANCES:
            raise ValueError(f"evaluator.tolerance must be one of {', '.join(TOLERANCES)}, not {self.tolerance!r}")
        if self.race_reps < 3 or not 0 <= self.race_margin < 1:
            raise ValueError("evaluator.race_reps must be >= 3 and evaluator.race_margin in [0, 1)")
        if self.pipeline is not None and self.pipeline < 1:
            raise ValueError("evaluator.pipeline must be >= 1 (null: 3 on a GPU, 1 on the CPU)")
        if self.prepare_workers is not None and self.prepare_workers < 1:
            raise ValueError("evaluator.prepare_workers must be >= 1 (null: chosen from the CPU count)")
        if self.time_shapes not in ("largest", "all"):
            raise ValueError(f"evaluator.time_shapes must be largest or all, not {self.time_shapes!r}")
        if self.timeout_s <= 0:
            raise ValueError("evaluator.timeout_s must be positive")
        if self.roofline_peaks is not None:
            peaks = dict(self.roofline_peaks)
            if set(peaks) != {"bytes_per_s", "flops_per_s"} or min(float(v) for v in peaks.values()) <= 0:
                raise ValueError("evaluator.roofline_peaks needs positive bytes_per_s and flops_per_s, or null")
            object.__setattr__(self, "roofline_peaks", {k: float(v) for k, v in peaks.items()})
        if self.roofline_limit <= 0 or self.noise_floor < 0:
            raise ValueError("evaluator.roofline_limit must be positive and evaluator.noise_floor >= 0")
        if not 0 <= self.triton_share_min <= 1 or self.timed_samples < 0:
            raise ValueError("evaluator.triton_share_min must be in [0, 1] and timed_samples >= 0")
        if self.timing.input_sets < 1 or self.cpu_timing.input_sets < 1:
            raise ValueError("evaluator.timing.input_sets must be >= 1")
        if not 0 < self.gpu_memory_fraction <= 1 or self.memory_limit_mb <= 0:
            raise ValueError("evaluator.gpu_memory_fraction must be in (0, 1] and memory_limit_mb positive")


def pipeline_depth(settings: EvaluatorSettings, device: str) -> int:
    """Evaluations in flight per device (``evaluator.pipeline``; null: 3 on a GPU, 1 on the CPU,
    where the interpreter's evaluations share two cores with the engine)."""
    return settings.pipeline or (3 if device == "cuda" else 1)


def evaluation_slots(settings: EvaluatorSettings, device: str) -> int:
    """Evaluations to keep asked of one device: its pipeline and, with one, one more waiting for a
    worker, so that a worker set free starts the next at once and an evaluation waiting for its task's
    torch.compile baseline (measured by another) holds no worker."""
    depth = pipeline_depth(settings, device)
    return depth + 1 if depth > 1 else 1


class Evaluator:
    """Evaluates candidates in sandbox worker processes on one device: ``pipeline_depth`` of them at
    once, each timed alone (:meth:`evaluate` may be called from ``slots`` threads: the others wait
    for a worker)."""

    def __init__(self, settings: EvaluatorSettings, device: str, cuda_index: int | None = None,
                 scratch_root: str | None = None):
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be resolved to cpu or cuda, not {device!r}")
        self.settings = settings
        self.device = device
        self.depth = pipeline_depth(settings, device)
        self.slots = evaluation_slots(settings, device)  # callers of evaluate at once (islands.backend)
        self._cuda_index, self._scratch_root = cuda_index, scratch_root
        self.workers = [self._new_worker() for _ in range(self.depth)]
        self.worker = self.workers[0]  # checks and seeds at start-up
        self.gate = TimingGate() if self.depth > 1 else None
        for worker in self.workers if self.gate else []:
            worker.gate = self.gate
            self.gate.join(worker)
        self._idle: queue.SimpleQueue[SandboxWorker] = queue.SimpleQueue()
        for worker in self.workers:
            self._idle.put(worker)
        self._baselines: dict[str, dict] = {}  # (compiler settings, task source) hash -> the baseline's ratio
        self._baseline_locks: dict[str, threading.Lock] = {}
        self._baseline_started: set[str] = set()  # keys whose measurement has begun (prefetch_baseline)
        self._locks_lock = threading.Lock()
        self._baseline_worker: SandboxWorker | None = None  # measures the baselines, beside the pipeline
        self._baseline_worker_lock = threading.Lock()
        self._peaks: dict | None = None  # this GPU's measured roofline peaks, once measured
        self._peaks_lock = threading.Lock()
        self._peaks_failures = 0  # out of memory beside other evaluations, say: tried again, three times

    def _new_worker(self) -> SandboxWorker:
        """A sandbox worker on this evaluator's device (started at its first request)."""
        return SandboxWorker(device=self.device, cuda_index=self._cuda_index, scratch_root=self._scratch_root,
                             cache_dir=self.settings.cache_dir)

    def _request(self, kind: str, task_name: str, task_source: str, *, worker: SandboxWorker | None = None,
                 **extra) -> dict:
        timing = self.settings.timing if self.device == "cuda" else self.settings.cpu_timing
        message = {
            "kind": kind, "task_name": task_name, "task_source": task_source,
            "device": "cuda" if self.device == "cuda" else "cpu",
            "seeds": list(self.settings.seeds), "cpu_max_numel": self.settings.cpu_max_numel,
            "timing": {"warmup": timing.warmup, "warmup_s": timing.warmup_s, "reps": timing.reps,
                       "budget_s": timing.budget_s, "batch": timing.batch, "input_sets": timing.input_sets,
                       "input_sets_mb": timing.input_sets_mb},
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
                    "roofline_peaks": "measuring the GPU's peaks"}.get(kind, "the torch.compile baseline")
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
        with lock:
            if key not in self._baselines:
                with self._baseline_worker_lock:  # one baseline at a time: each times alone anyway
                    worker = self._baseline_worker or self._start_baseline_worker()
                    reply = self._request("compile_baseline", task_name, task_source, worker=worker)
                    if self.gate and reply.get("out_of_memory"):  # beside other evaluations: again, alone
                        reply = self._request("compile_baseline", task_name, task_source, worker=worker,
                                              exclusive=True)
                if "ratio" not in reply:
                    reply = {"error": reply.get("error") or "the torch.compile baseline gave no ratio"}
                self._baselines[key] = reply
            return self._baselines[key]

    def _baseline_key(self, task_source: str) -> str | None:
        """The cache key of a task's torch.compile baseline (``compile_timing=cached``), else None."""
        settings = self._compile_baseline()
        if not settings or settings["timing"] != "cached":
            return None
        return hashlib.sha256(f"{settings['backend']}:{settings['mode']}:{task_source}".encode()).hexdigest()

    def _prefetch_baseline(self, task_name: str, task_source: str) -> None:
        """Start measuring the task's baseline as its first evaluation is asked, not once that one is
        timed: inductor's compile (host work, spared by the gate) then overlaps the first candidates'
        start and checks instead of holding their results (and their callers' slots) for 6-17 s."""
        key = self._baseline_key(task_source)
        with self._locks_lock:
            if key is None or key in self._baseline_started:
                return
            self._baseline_started.add(key)
        threading.Thread(target=self._cached_baseline, args=(task_name, task_source), daemon=True,
                         name=f"baseline-{task_name}").start()

    def _start_baseline_worker(self) -> SandboxWorker:
        worker = self._new_worker()
        if self.gate:  # stopped while an evaluation times, like the pipeline's workers
            worker.gate = self.gate
            self.gate.join(worker)
        self._baseline_worker = worker
        return worker

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
                 race_bar: float | None = None) -> EvalResult:
        """Score one candidate; ``race_bar`` (its parent's speedup) lets a clearly slower child keep
        a short timing round (``evaluator.race``)."""
        asked = time.monotonic()
        race = {"bar": race_bar, "reps": self.settings.race_reps, "margin": self.settings.race_margin} \
            if self.settings.race and race_bar else None
        if self.settings.prefetch_baseline:
            self._prefetch_baseline(task_name, task_source)
        worker, baseline_s, entry = self._idle.get(), 0.0, None
        began = time.monotonic()  # waiting for a worker (the slot beyond the pipeline) is queued_s
        try:
            peaks = {"roofline_peaks": self._roofline_peaks(worker)}
            reply = self._request("evaluate", task_name, task_source, worker=worker,
                                  candidate_source=candidate_source, race=race, **peaks)
            if self.gate and _out_of_memory(reply):  # beside other evaluations: again, the GPU alone
                reply = self._request("evaluate", task_name, task_source, worker=worker,
                                      candidate_source=candidate_source, race=race, exclusive=True, **peaks)
        finally:
            self._idle.put(worker)
        if reply.get("ref_runtime_ms"):  # timed: its task's torch.compile baseline, measured if first
            measured = time.monotonic()
            entry = self._cached_baseline(task_name, task_source)
            baseline_s = time.monotonic() - measured
        if "sandbox" in reply:
            status = Status.TIMEOUT if reply["sandbox"] == "timeout" else Status.CRASHED
            result = EvalResult(status=status, reason=reply["reason"], error=trim(reply.get("log", "")))
        elif "harness_error" in reply:
            result = EvalResult(status=Status.CRASHED, reason=reply["harness_error"])
        else:
            result = EvalResult.from_dict(reply)
            _apply_baseline(result, entry)
        # The harness times its own phases; what it cannot see (starting the child, the request and
        # the reply, a worker started again) is the host's share.
        phases = result.extra.setdefault("phases", {})
        total = time.monotonic() - began
        if baseline_s > 0.05:  # this evaluation waited for its task's baseline, measured after its timing
            phases["baseline_compile_s"] = phases.get("baseline_compile_s", 0.0) + baseline_s
        phases["host_s"] = max(0.0, total - result.wall_s - baseline_s)
        phases["total_s"] = total
        if began - asked > 0.01:
            phases["queued_s"] = began - asked
        return result

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
            worker = self._new_worker()
            if self.gate:
                worker.gate = self.gate
                self.gate.join(worker)
            made.append(worker)
            return worker

        def request(worker: SandboxWorker, kind: str, name: str, source: str) -> dict:
            return self._request(kind, name, source, worker=worker)

        def run() -> None:
            end: object = done
            try:
                prepare_tasks(request, tasks, parallel or self.prepare_workers, make_worker,
                              on_outcome=lambda name, outcome: outcomes.put((name, outcome)))
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

    def prepare_here(self, tasks: list[Preparation]) -> dict[str, dict]:
        """:meth:`prepare` with this host's number of workers (what a Ray actor is asked)."""
        return self.prepare(tasks, self.prepare_workers)

    def prepare_stream_here(self, tasks: list[Preparation]) -> Iterator[tuple[str, dict]]:
        """:meth:`prepare_stream` with this host's number of workers (a Ray actor's streaming generator)."""
        yield from self.prepare_stream(tasks)

    def close(self) -> None:
        for worker in [*self.workers, *([self._baseline_worker] if self._baseline_worker else [])]:
            worker.close()


def _apply_baseline(result: EvalResult, entry: dict | None) -> None:
    """The cached torch.compile baseline chained with this evaluation's own eager time:
    ``compiled_ms = eager_ms(this run) * compiled/eager`` (``evaluator.baseline``)."""
    if entry is None or not result.ref_runtime_ms or not result.runtime_ms:
        return
    if "ratio" in entry:
        result.compiled_runtime_ms = entry["ratio"] * result.ref_runtime_ms
        result.speedup_vs_compiled = result.compiled_runtime_ms / result.runtime_ms
    else:
        result.extra["compile_baseline_error"] = entry["error"]


def _out_of_memory(reply: dict) -> bool:
    if reply.get("status") == "correct":
        return False
    text = f"{reply.get('reason', '')} {reply.get('error', '')} {reply.get('harness_error', '')}".lower()
    return "out of memory" in text

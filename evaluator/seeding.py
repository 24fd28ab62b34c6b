"""Seeds from ``torch.compile`` for many tasks at once, on one GPU.

Deriving a seed is mostly CPU work (dynamo, inductor, Triton compiles, the GEMM
autotuning's benchmarks are short), so several sandbox workers derive several tasks'
seeds side by side, each through :meth:`Evaluator.compile_seed`.  What limits them is
memory: each derivation holds its reference's inputs and weights on the GPU (and, while
``get_inputs`` builds them, in host memory).  A task may carry an estimate of that
footprint; a derivation starts only while the estimates of those running fit the budget
(a task alone always starts).  A derivation that still ran out of GPU memory (someone
else held it) is tried once more at the end, alone.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evaluator.evaluator import Evaluator, EvaluatorSettings


@dataclass(frozen=True)
class SeedJob:
    name: str
    source: str
    footprint_gb: float = 0.0  # GPU (and host) memory the derivation is expected to hold


class MemoryAdmission:
    """Starts jobs while their footprints fit the budget, largest first."""

    def __init__(self, jobs: Sequence[SeedJob], budget_gb: float):
        self.pending = sorted(jobs, key=lambda j: -j.footprint_gb)
        self.budget_gb, self.used_gb, self.running = budget_gb, 0.0, 0
        self.cond = threading.Condition()

    def take(self) -> SeedJob | None:
        with self.cond:
            while True:
                if not self.pending:
                    return None
                room = self.budget_gb - self.used_gb
                job = next((j for j in self.pending if j.footprint_gb <= room or self.running == 0), None)
                if job is not None:
                    self.pending.remove(job)
                    self.used_gb += job.footprint_gb
                    self.running += 1
                    return job
                self.cond.wait()

    def done(self, job: SeedJob) -> None:
        with self.cond:
            self.used_gb -= job.footprint_gb
            self.running -= 1
            self.cond.notify_all()


def derive_seeds(jobs: Sequence[SeedJob], *, settings: EvaluatorSettings, workers: int = 4,
                 cuda_index: int | None = None, budget_gb: float = 48.0,
                 on_reply: Callable[[str, dict], None] | None = None,
                 make_evaluator: Callable[[], Evaluator] | None = None) -> dict[str, dict]:
    """``{task name: Evaluator.compile_seed's reply}`` for every job, each reply with the
    derivation's wall time (``seconds``); ``workers`` sandbox workers derive side by side
    (``make_evaluator`` builds each one's evaluator: by default on GPU ``cuda_index``).
    ``on_reply`` hears of every reply as it comes."""
    if workers < 1:
        raise ValueError("derive_seeds needs at least one worker")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError("derive_seeds: task names must be distinct")
    replies: dict[str, dict] = {}
    lock = threading.Lock()

    def derive(evaluator: Evaluator, job: SeedJob) -> dict:
        began = time.monotonic()
        reply = evaluator.compile_seed(job.name, job.source)
        reply["seconds"] = round(time.monotonic() - began, 2)
        return reply

    def record(job: SeedJob, reply: dict) -> None:
        with lock:
            replies[job.name] = reply
        if on_reply is not None:
            on_reply(job.name, reply)

    def work(admission: MemoryAdmission, last_try: bool) -> None:
        evaluator = make_evaluator() if make_evaluator else Evaluator(settings, "cuda", cuda_index)
        try:
            while (job := admission.take()) is not None:
                try:
                    reply = derive(evaluator, job)
                finally:
                    admission.done(job)
                if reply.get("out_of_memory") and not last_try:
                    with lock:
                        retry.append(job)
                else:
                    record(job, reply)
        finally:
            evaluator.close()

    retry: list[SeedJob] = []
    admission = MemoryAdmission(jobs, budget_gb)
    threads = [threading.Thread(target=work, args=(admission, False), name=f"seed-{i}", daemon=True)
               for i in range(min(workers, len(jobs)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if retry:  # alone on the GPU this time
        work(MemoryAdmission(retry, 0.0), True)
    return {name: replies[name] for name in names}

"""How candidates are checked and timed (``conf/evaluator/*.yaml``), and how many at once per device."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from evaluator.choices import Tolerance, check_choices
from evaluator.containment import Mode


@dataclass(frozen=True)
class TimingSettings:
    warmup: int = 3
    warmup_s: float = 0.0  # and at least this long (GPU clocks ramp up after idling)
    reps: int = 100
    budget_s: float = 2.0  # stop repeating once this much time went into timing
    batch: int = 8  # GPU: pairs of calls queued between synchronisations (1: synchronise around each)
    input_sets: int = 3  # timed calls take these many input sets (seeded apart, allocated apart) in turn
    input_sets_mb: float = 256.0  # at most this much for the extra sets (beyond it: 2 sets)
    # Before each timed call the set it takes is made again from a new seed (sets of up to
    # fresh_inputs_mb, where the GPU has room for one more beside them): no timed call sees values an
    # earlier one saw (evaluator.fresh_inputs).
    fresh_inputs: bool = True
    fresh_inputs_mb: float = 8192.0
    # Stop repeating, after min_reps, once every speedup's noise (relative half-width of its ~95%
    # interval) is at most this; 0: always reps (or budget_s).  What a result's timing cost then
    # follows the kernel's own stability; its reported noise is that of the samples it took.
    precision: float = 0.0
    min_reps: int = 20


# Tolerances where a task sets no ATOL/RTOL: ``strict`` keeps evaluator.compare's per-dtype defaults
# (fp32 1e-4, as KernelBench's current harness); ``kernelbench`` is atol = rtol = 1e-2 for every dtype,
# as in the KernelBench paper's published fast_p figures (versions 0 and 0.1).
TOLERANCES: dict[Tolerance, float | None] = {"strict": None, "kernelbench": 1e-2}


@dataclass(frozen=True)
class EvaluatorSettings:
    """How candidates are checked and timed (``conf/evaluator/*.yaml``)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    seeds: tuple[int, ...] = (0, 1)
    timeout_s: float = 120.0
    cpu_max_numel: int = 1 << 16  # on the CPU, larger shape sets are skipped
    timing: TimingSettings = field(default_factory=lambda: TimingSettings(warmup_s=0.2))
    cpu_timing: TimingSettings = field(default_factory=lambda: TimingSettings(warmup=1, reps=3, budget_s=1.0, batch=1))
    workers: int | None = None  # None: one per GPU, or one on the CPU
    cache_dir: str | None = None  # Triton's compile cache for every worker; None: see share_compile_cache
    # With cache_dir None, the pipeline's workers on one device share one Triton compile cache: a kernel a
    # child keeps unchanged from its parent is compiled once, not once per worker.  The baseline's and the
    # preparation's workers keep caches of their own (what candidates write cannot reach the baseline).
    share_compile_cache: bool = True
    noise_floor: float = 0.01  # speedups closer than this (relative) are not told apart
    roofline_limit: float = 1.2  # beyond this fraction of the roofline a result is re-verified
    roofline_peaks: dict | None = None  # {bytes_per_s, flops_per_s[, tf32_flops_per_s]}; None: measured on each GPU
    compile_baseline: bool | None = None  # time torch.compile of the reference; None: on GPUs only
    compile_backend: str = "inductor"
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] | None = None
    # cached: a compiled-over-eager ratio per task and device | live: timed interleaved with each candidate
    compile_timing: Literal["cached", "live"] = "cached"
    # The task's torch.compile baseline (cached) measured from its first evaluation's request, beside
    # it, instead of after that evaluation's timing.
    prefetch_baseline: bool = True
    # Evaluations in flight per device: while one is timed (alone on the GPU: evaluator.gate), the
    # others start and compile (host work, spared by the gate), load and are checked.  None: 3 on a
    # GPU (KernelBench set, H100: 17.2 against 15.0 with 2 and 13.1 with 1 evaluations per GPU-minute
    # in round 5, 16.4 against 15.6 with 2 in round 7 of throughput_bench.md; each in flight holds its
    # own GPU memory, and one that runs out beside the others is evaluated again alone), 1 on the CPU.
    pipeline: int | None = None
    # The pipeline's workers (and the baseline's) started, and the GPU's roofline peaks measured, in
    # the background as the evaluator is made, while the run checks its tasks: not by the first
    # evaluations, inside the search.  None: on a GPU (on the CPU, the tests' evaluators mostly check).
    warm_start: bool | None = None
    # Racing: a child is first timed for race_reps repetitions against eager; one clearly slower
    # than its parent (by race_margin, beyond its noise) keeps that measurement, the others are
    # timed in full.  What each got is in its result (extra.timing_round).
    race: bool = True
    race_reps: int = 10
    race_margin: float = 0.1
    # all: time every shape set too (per-shape speedups, for export buckets)
    time_shapes: Literal["largest", "all"] = "largest"
    memory_limit_mb: int = 32768  # host memory (RSS) of one evaluation; its process group is killed beyond
    gpu_memory_fraction: float = 0.9  # of the GPU, for one evaluation's allocations
    isolate_network: bool = True  # a private network namespace for candidates, where the OS allows
    containment: Mode = "auto"  # auto: namespaces where the OS allows, else Landlock | landlock | off
    prepare_workers: int | None = None  # sandbox workers per device checking references and deriving seeds
    tolerance: Tolerance = "strict"  # strict: per-dtype defaults (fp32 1e-4) | kernelbench: atol = rtol = 1e-2
    # The timed calls held to the checks' rules (evaluator.timed_checks): every call's launches counted,
    # outputs kept at random (drawn after each call) and checked, the round after the last checked, and
    # one audited batch (dispatch monitor; on a GPU this share of its device time in the candidate's kernels).
    # A correct result faster than this over the best of eager and torch.compile is evaluated again,
    # in a fresh process on fresh inputs with every timed call checked, before it counts
    # (evaluator.plausibility; KernelBench flags speedups above 10x as likely reward hacking).
    plausible_speedup: float = 10.0
    verify_timed: bool = True
    timed_samples: int = 3  # timed calls whose outputs are kept and checked, drawn after each call returns
    triton_share_min: float = 0.9

    def __post_init__(self):
        check_choices(self, "evaluator")
        if not self.seeds:
            raise ValueError("evaluator.seeds needs at least one seed")
        if self.race_reps < 3 or not 0 <= self.race_margin < 1:
            raise ValueError("evaluator.race_reps must be >= 3 and evaluator.race_margin in [0, 1)")
        if self.pipeline is not None and self.pipeline < 1:
            raise ValueError("evaluator.pipeline must be >= 1 (null: 3 on a GPU, 1 on the CPU)")
        if self.prepare_workers is not None and self.prepare_workers < 1:
            raise ValueError("evaluator.prepare_workers must be >= 1 (null: chosen from the CPU count)")
        if self.timeout_s <= 0:
            raise ValueError("evaluator.timeout_s must be positive")
        if self.roofline_peaks is not None:
            peaks = dict(self.roofline_peaks)
            if not {"bytes_per_s", "flops_per_s"} <= set(peaks) <= {"bytes_per_s", "flops_per_s", "tf32_flops_per_s"} \
                    or min(float(v) for v in peaks.values()) <= 0:
                raise ValueError("evaluator.roofline_peaks needs positive bytes_per_s and flops_per_s "
                                 "(and optionally tf32_flops_per_s), or null")
            object.__setattr__(self, "roofline_peaks", {k: float(v) for k, v in peaks.items()})
        if self.roofline_limit <= 0 or self.noise_floor < 0:
            raise ValueError("evaluator.roofline_limit must be positive and evaluator.noise_floor >= 0")
        if self.plausible_speedup <= 0:
            raise ValueError("evaluator.plausible_speedup must be positive (a speedup over the best baseline)")
        if not 0 <= self.triton_share_min <= 1 or self.timed_samples < 0:
            raise ValueError("evaluator.triton_share_min must be in [0, 1] and timed_samples >= 0")
        if self.timing.input_sets < 1 or self.cpu_timing.input_sets < 1:
            raise ValueError("evaluator.timing.input_sets must be >= 1")
        for timing in (self.timing, self.cpu_timing):
            if not 0 <= timing.precision < 1 or timing.min_reps < 3:
                raise ValueError("evaluator.timing.precision must be in [0, 1) and min_reps >= 3")
        if not 0 < self.gpu_memory_fraction <= 1 or self.memory_limit_mb <= 0:
            raise ValueError("evaluator.gpu_memory_fraction must be in (0, 1] and memory_limit_mb positive")

    def on(self, device: str) -> EvaluatorSettings:
        """These settings for evaluations on ``device`` (cpu or cuda), with ``pipeline`` a number: null is 3
        on a GPU, 1 on the CPU (where the interpreter's evaluations share two cores with the engine).  The
        run's start-up decides it once, where it resolves the device, and passes it down; settings made by
        hand (tests, experiments) are decided by the Evaluator given them, the same way."""
        if self.pipeline is not None:
            return self
        return dataclasses.replace(self, pipeline=3 if device == "cuda" else 1)


def evaluation_slots(depth: int) -> int:
    """Evaluations to keep asked of one device with a pipeline of ``depth``: those and, with more than
    one, one more waiting for a worker, so that a worker set free starts the next at once and an
    evaluation waiting for its task's torch.compile baseline (measured by another) holds no worker."""
    return depth + 1 if depth > 1 else 1

"""Pipeline benchmark (issue 5): the whole engine on GPUs, fed by an LLM endpoint of fixed latency.

On a two-GPU machine (about 7 minutes, Ray start-up included):

    RAY_USAGE_STATS_ENABLED=0 python3 -m experiments.pipeline_bench --out $OUT/pipeline_bench

On a CPU machine, through Triton's interpreter (a smoke run, about 15 s):

    TRITON_INTERPRET=1 python -m experiments.pipeline_bench --device cpu --backend local \\
        --configs 1x1 --tasks gelu --evaluations 2 --latency 0.05 --out /tmp/pipeline_bench

Each configuration (ISLANDSxEVALUATORS[xPROPOSALS_PER_ISLAND]) runs the real engine
as ``evo run`` builds it from the Hydra config: the run loop, islands (Ray actors with
``--backend ray``), the LLM operators (rewrite, diff, crossover) through litellm
against a scripted OpenAI-compatible server (``experiments.proposal_rate_bench``'s:
its own process, replies from ``tests.support.llm_server.Variants``, so every child is a new
correct kernel) that answers after ``--latency`` seconds, and the sandboxed
evaluator, one per GPU (``evaluator.workers``: with Ray each evaluator actor
reserves one GPU, so one evaluator on a two-GPU machine uses one of them).  The
built-in suite, no torch.compile baseline, no offline operators: every child comes
through the LLM.

Latency and proposals in flight: two H200s evaluate a child about every 1.75 s
(3.5 s per evaluation), so at 2 s latency 1.2 requests in flight would feed them on
average.  One island with 4 in flight (what ``experiment=multi_gpu`` uses) supplies
3.5 times that: the 1-island configuration measures whether one island actor and
the run loop keep two GPUs busy, not the LLM.  4 islands hold 16 in flight, and so
do 16 islands with 1 each (``16x2x1``): same concurrency, 4 times the actors.  With
16 x 4 the default 24 children would all be proposed in the first wave.

Figures per configuration (``pipeline_figures.figures``): children per hour over
three spans (steady: completions after the first child's; the child window: first
child handed over to last child back; the whole run loop); per evaluator the busy
fraction, seen from the run loop (program handed over until its result was back)
and from the sandbox (the evaluations' own ``wall_s``); proposals and LLM requests
in flight (time-weighted means by Little's law, maxima sampled at each evaluation's
end), the queue; and the engine's CPU seconds per child: the driver process, the
island actors and the evaluator actors' host side (Ray only; locally all three live
in the driver), never the LLM server's or the sandbox processes'.  One-time start-up
(Ray, actor start, litellm's import) is outside the clock; evaluator workers start
on their first (seed) evaluation, outside the child window.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from archive import Archive  # noqa: E402
from evaluator import resolve_device  # noqa: E402
from evo.config import build  # noqa: E402
from evo.loop.controller import Controller  # noqa: E402
from evo.core.program import Program  # noqa: E402
from evo.views.progress import RunEvents  # noqa: E402
from evo.runner import code_version, make_backend  # noqa: E402
from experiments.pipeline_figures import TimedBackend, figures, table  # noqa: E402
from experiments.proposal_rate_bench import Server  # noqa: E402
from operators import Context  # noqa: E402

CLOCK = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} +{time.monotonic() - CLOCK:5.0f} s] {message}", flush=True)


def compose(overrides: list[str]):
    """The config `evo run` would build from ``overrides``, with a price for the scripted model."""
    from hydra import compose as hydra_compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="conf", version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=overrides)
    # A priced model puts cost accounting on the path (Hydra's override grammar has no key with a slash).
    OmegaConf.update(cfg, "llm.prices", {"openai/scripted": [0.15, 0.6]}, merge=False)
    return cfg


@dataclass(frozen=True)
class Setup:
    """One configuration: ISLANDSxEVALUATORS[xPROPOSALS_PER_ISLAND] on the command line."""

    islands: int
    evaluators: int
    per_island: int

    @classmethod
    def parse(cls, text: str, per_island: int) -> "Setup":
        numbers = [int(n) for n in text.split("x")]
        if len(numbers) not in (2, 3) or min(numbers) < 1:
            raise ValueError(f"{text!r}: want ISLANDSxEVALUATORS[xPROPOSALS_PER_ISLAND]")
        return cls(*numbers) if len(numbers) == 3 else cls(*numbers, per_island)


def overrides(args, setup: Setup, api_base: str, run_dir: Path) -> list[str]:
    """The `evo run` overrides of one configuration."""
    return [
        f"run.dir={run_dir}", "run.progress=false", f"run.backend={args.backend}",
        f"run.budget.evaluations={args.evaluations}", f"run.proposals_per_island={setup.per_island}",
        f"islands.count={setup.islands}", f"evaluator.workers={setup.evaluators}", f"evaluator.device={args.device}",
        "evaluator.compile_baseline=false",
        "llm.model=openai/scripted", f"llm.api_base={api_base}", "llm.timeout_s=60",
        # Requests in flight are bounded per process: the local backend's islands share one.
        f"llm.max_in_flight={max(32, setup.islands * setup.per_island)}",
        "operators.constants.weight=0", "operators.param_crossover.weight=0", "operators.dot_precision.weight=0", "operators.load_hints.weight=0", "operators.split_k.weight=0", "operators.persistent_tiles.weight=0", "operators.persistent_reduction.weight=0", "operators.split_reduction.weight=0", "operators.fuse_epilogue.weight=0",
        "operators.sweep.operator.max_children=0",
    ] + ([f"task.names=[{','.join(args.tasks)}]"] if args.tasks else [])


class Samples:
    """The run's events, to events.jsonl as in `evo run`, keeping the in-flight counts of each evaluation."""

    def __init__(self, events: RunEvents, budget: int):
        self.events, self.budget = events, budget
        self.in_flight: list[dict] = []

    def __call__(self, kind: str, **fields) -> None:
        if kind == "evaluated":
            self.in_flight.append(fields["in_flight"])
            done = fields["children_done"]
            if fields["program"].operator != "seed" and done % max(1, self.budget // 4) == 0:
                log(f"  {done}/{self.budget} children, in flight: {fields['in_flight']}")
        self.events(kind, **fields)


def _actor_cpu(actors) -> float:
    """CPU seconds the actors' processes have spent so far (their sandboxes are other processes)."""
    import ray

    return sum(ray.get([a.__ray_call__.remote(lambda self: __import__("time").process_time()) for a in actors]))


def _warm_islands(backend, task, rounds: int = 8) -> None:
    """Proposals before the clock, until each island has made an LLM request: starts the actors and
    imports litellm in each (a crossover without a second parent makes none)."""
    parent = Program(id=0, task=task.name, island=0, generation=0, operator="seed", source=task.seeds[0])
    cold = list(range(backend.island_count))
    for _ in range(rounds):
        futures = {i: backend.propose(i, Context(task_name=task.name, task_source=task.source, parent=parent))
                   for i in cold}
        cold = [i for i, future in futures.items() if not future.result().llm_calls]
        if not cold:
            return


def measure(args, setup: Setup, api_base: str, device: str, gpus: int, root: Path) -> dict:
    run_dir = root / f"islands{setup.islands}_evaluators{setup.evaluators}_per_island{setup.per_island}"
    c = build(compose(overrides(args, setup, api_base, run_dir)))
    c.llm.check()  # as `evo run` does: imports litellm in the driver, outside the clock
    inner = make_backend(c, device, gpus, 0)
    ray_actors = (inner.islands, inner.evaluators) if args.backend == "ray" else None
    try:
        _warm_islands(inner, c.tasks[0])
        backend = TimedBackend(inner, {s for t in c.tasks for s in t.seeds})
        run_dir.mkdir(parents=True)
        archive = Archive(c.archive_url, descriptors=c.descriptors, cvt_cells=c.cvt_cells, seed=c.run.seed)
        events = RunEvents(run_dir, c.run.budget_evaluations, show=False)
        samples = Samples(events, c.run.budget_evaluations)
        controller = Controller(settings=c.run, tasks=c.tasks, archive=archive, backend=backend,
                                migration=c.migration, events=samples, selection=c.selection,
                                inspiration=c.inspiration, steering=c.steering)
        actors_before = [_actor_cpu(a) for a in ray_actors] if ray_actors else None
        cpu_before, start = time.process_time(), backend.now()
        controller.run()
        end, cpu = backend.now(), {"driver": time.process_time() - cpu_before}
        if ray_actors:
            cpu["islands"], cpu["evaluator_hosts"] = (_actor_cpu(a) - b for a, b in zip(ray_actors, actors_before))
        events.close()
        archive.close()
        return figures(backend, samples.in_flight, (start, end), cpu)
    finally:
        inner.close()
        if ray_actors:  # free the GPUs for the next configuration now, not when the handles are collected
            import ray

            for actor in [*ray_actors[0], *ray_actors[1]]:
                ray.kill(actor)


def _start_ray(evaluators: int) -> int:
    """One local Ray for all configurations; the GPUs it sees.  CPU evaluators reserve a CPU each
    and the islands a sliver: as many CPUs as RayBackend would start its own Ray with."""
    import logging

    import ray

    ray.init(num_cpus=max(os.cpu_count() or 1, evaluators + 1), include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING, configure_logging=True)
    return int(ray.cluster_resources().get("GPU", 0))


def write(out: Path, header: dict, results: list[dict]) -> str:
    text = table(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pipeline_bench.json").write_text(json.dumps({**header, "configurations": results}, indent=1))
    (out / "pipeline_bench.md").write_text(
        f"# Pipeline benchmark\n\n`{header['command']}` on {header['host']}, device {header['device']}, "
        f"{header['gpus']} GPUs; engine {header['code_version']}.\n\n{text}")
    return text


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="4x2,4x1,1x2,16x2x1",
                        help="ISLANDSxEVALUATORS[xPROPOSALS_PER_ISLAND], comma-separated (evaluators: GPUs used)")
    parser.add_argument("--evaluations", type=int, default=24, help="children per configuration")
    parser.add_argument("--latency", type=float, default=2.0, help="seconds the LLM server takes per reply")
    parser.add_argument("--in-flight", type=int, default=4, help="run.proposals_per_island where a config "
                        "does not say")
    parser.add_argument("--backend", choices=["ray", "local"], default="ray")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--tasks", type=lambda s: s.split(","), default=None, help="default: the whole suite")
    parser.add_argument("--out", type=Path, required=True, help="a directory for the JSON and the table")
    args = parser.parse_args(argv)
    try:
        args.configs = [Setup.parse(c, args.in_flight) for c in args.configs.split(",")]
    except ValueError as exc:
        parser.error(f"--configs: {exc}")
    return args


def main(argv=None) -> list[dict]:
    args = parse(argv)
    server = Server(args.latency, log=False)  # forked before Ray starts threads in this process
    api_base = server.api_base
    device, gpus = resolve_device(args.device)
    if args.backend == "ray":
        log("starting Ray")
        ray_gpus = _start_ray(max(s.evaluators for s in args.configs))
        gpus = ray_gpus if device == "cuda" else gpus
    header = {"command": "python -m experiments.pipeline_bench " + " ".join(argv or sys.argv[1:]),
              "host": f"{platform.node()} ({os.cpu_count()} CPUs), Python {platform.python_version()}",
              "device": device, "gpus": gpus, "code_version": code_version(), "latency_s": args.latency,
              "evaluations": args.evaluations, "backend": args.backend}
    results: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
            for setup in args.configs:
                entry = {"islands": setup.islands, "evaluators": setup.evaluators,
                         "proposals_per_island": setup.per_island}
                log(f"{setup.islands} islands, {setup.evaluators} evaluators, {setup.per_island} proposals in "
                    f"flight per island: {args.evaluations} children")
                if device == "cuda" and setup.evaluators > gpus:
                    entry["error"] = f"needs {setup.evaluators} GPUs, {gpus} here"
                else:
                    try:
                        entry["figures"] = measure(args, setup, api_base, device, gpus, Path(tmp))
                    except Exception as exc:  # keep the other configurations' figures
                        entry["error"] = f"{type(exc).__name__}: {exc}"
                        traceback.print_exc()
                results.append(entry)
                text = write(args.out, header, results)  # after each one: a timeout still leaves data
                log("done\n" + text)
    finally:
        server.stop()
        if args.backend == "ray":
            import ray

            ray.shutdown()
    return results


if __name__ == "__main__":
    main()

"""Proposal-rate benchmark: how close the engine gets to the rate an LLM endpoint allows.

    python -m experiments.proposal_rate_bench --out experiments/proposal_rate_bench.md

A scripted OpenAI-compatible server (replies from ``tests.support.llm_server.Variants``,
each a new child) runs in its own process on asyncio, so that its own overhead
stays small, and answers each request after a fixed latency.  The engine runs the real run loop (``evo.loop.controller.Controller``),
islands and LLM operators (diff and rewrite, through the client's transport:
``--transport``, by default ``auto``, which is plain HTTP for this endpoint) on the local
backend, with ``TrivialEvaluator`` standing in for the evaluator, so the figures
are the proposal path's and the run loop's own.

- At latency L with K requests in flight the theoretical rate is K / L
  proposals per second.  Two figures of what the engine sustains: over the
  whole run, N = waves x K proposals over the time from the first submission
  to the last reply (ramp and drain included); and in the steady state, replies
  per second at the server from the K-th request to the last one
  (``steady_rate``).  Target (issue 7): >= 97% at K=32, L=2 s.  K is what the
  endpoint sees: each island sends at most K / islands requests at once
  (``Island(requests=...)``) while the loop keeps ``--prepared`` more proposals
  per island ready; the server logs every request, and the run fails if it
  ever held more than K at once.
- At zero latency the rate is the engine's overhead per child (LLM path, and
  the offline operator alone).  Target: > 50 children per second.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import queue as queue_module
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from archive import Archive  # noqa: E402
from evo.loop.controller import Controller  # noqa: E402
from evo.loop.run_settings import RunSettings  # noqa: E402
from evo.core.task import load_tasks  # noqa: E402
from islands import Island, LocalBackend, MigrationSettings  # noqa: E402
from evo.core.program import Program  # noqa: E402
from operators import Context, LLMClient, LLMDiff, LLMMutation, LLMSteering, TunableConstantMutation  # noqa: E402
from tests.support.llm_server import TrivialEvaluator, Variants  # noqa: E402


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, latency_s: float,
                  variants: Variants, log) -> None:
    """HTTP/1.1 keep-alive: each request is a POST with a JSON body; replies after ``latency_s``.
    Each request's arrival and the end of its wait go to ``log`` (monotonic clock, shared by processes)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            request = json.loads(await reader.readexactly(length) or b"{}")
            arrived = time.monotonic()
            await asyncio.sleep(latency_s)
            if log is not None:
                log.put((arrived, time.monotonic()))
            status, body = variants(request)
            data = json.dumps(body).encode()
            writer.write(b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (status, len(data), data))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def _serve(latency_s: float, port_queue, log) -> None:
    async def main():
        variants = Variants()  # no latency of its own: the server sleeps without a thread
        server = await asyncio.start_server(lambda r, w: _handle(r, w, latency_s, variants, log), "127.0.0.1",
                                            0, backlog=256)
        port_queue.put(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
        await server.serve_forever()

    asyncio.run(main())


class TimedBackend(LocalBackend):
    """The local backend, noting when each proposal was submitted and when it came back."""

    def __init__(self, islands, make_evaluator, evaluators, proposals_per_island, ray_islands=None):
        super().__init__(islands, make_evaluator, evaluators, proposals_per_island)
        self.ray_islands = ray_islands  # a RayBackend without evaluators: proposals go to its island actors
        self.submitted: list[float] = []
        self.returned: list[float] = []

    def propose(self, island, context):
        self.submitted.append(time.perf_counter())
        source = self.ray_islands if self.ray_islands is not None else super()
        future = source.propose(island, context)
        future.add_done_callback(lambda f: self.returned.append(time.perf_counter()))
        return future

    def close(self) -> None:
        super().close()
        if self.ray_islands is not None:
            self.ray_islands.close()


def measure(*, children: int, in_flight: int, api_base: str | None, islands: int = 2, ray: bool = False,
            transport: str = "auto", prepared: int | None = None) -> dict:
    """Run the loop for ``children`` evaluations; the proposal rate and the children rate."""
    tasks = load_tasks("default")
    if api_base:
        client = LLMClient(model="openai/scripted", api_base=api_base, timeout_s=60, retries=0,
                           max_in_flight=in_flight, prices={"openai/scripted": [0.15, 0.6]},  # a priced model
                           transport=transport)
        operators, weights = [LLMDiff(client=client), LLMMutation(client=client)], [1.0, 1.0]
        steering = LLMSteering(models=client.models, offline_operators=False)
    else:
        operators, weights, steering = [TunableConstantMutation()], [1.0], None
    per_island = max(1, in_flight // islands)  # requests in flight per island
    with tempfile.TemporaryDirectory() as tmp:
        settings = RunSettings(dir=tmp, seed=1, budget_evaluations=children, proposals_per_island=per_island,
                               prepared_per_island=prepared, max_failed_proposals=1000)
        held = settings.proposals_held(llm=steering is not None)  # proposals the loop keeps out per island
        archive = Archive(f"sqlite:///{Path(tmp) / 'archive.db'}")
        island_list = [Island(i, operators, weights, seed=1, requests=per_island) for i in range(islands)]
        ray_islands = None
        if ray:  # island actors in their own processes (threaded, per_island at once), as `evo run` has them
            from evaluator import EvaluatorSettings
            from islands.ray_backend import RayBackend, RaySettings

            ray_islands = RayBackend(RaySettings(num_cpus=os.cpu_count()), island_list, EvaluatorSettings(),
                                     "cpu", 0, held)
            if api_base:  # each actor process imports litellm on its first request: not part of the rate
                task = tasks[0]
                parent = Program(id=0, task=task.name, island=0, generation=0, operator="seed", source=task.seeds[0])
                for future in [ray_islands.propose(i % islands, Context(task_name=task.name, task_source=task.source,
                                                                        parent=parent)) for i in range(2 * islands)]:
                    future.result()
        backend = TimedBackend(island_list, lambda i: TrivialEvaluator(), 2, held, ray_islands)
        controller = Controller(settings=settings, tasks=tasks, archive=archive, backend=backend,
                                migration=MigrationSettings(interval=64), steering=steering)
        start = time.perf_counter()
        try:
            controller.run()
        finally:
            backend.close()
        wall = time.perf_counter() - start
        done = archive.child_evaluation_count()
        archive.close()
    span = max(backend.returned) - min(backend.submitted)
    return {"proposals": len(backend.returned), "children": done, "span_s": span, "wall_s": wall,
            "proposal_rate": len(backend.returned) / span, "child_rate": done / wall}


class Server:
    """The scripted server in its own process, and the log of the requests it answered (``log``)."""

    def __init__(self, latency_s: float, log: bool = True):
        queue, self._log = multiprocessing.Queue(), multiprocessing.Queue() if log else None
        self.process = multiprocessing.Process(target=_serve, args=(latency_s, queue, self._log), daemon=True)
        self.process.start()
        self.api_base = queue.get(timeout=30)

    def requests(self) -> list[tuple[float, float]]:
        """(arrival, end of its wait) of each request answered since the last call."""
        out = []
        try:
            while True:
                out.append(self._log.get(timeout=0.5))
        except queue_module.Empty:
            return sorted(out)

    def stop(self) -> None:
        self.process.terminate()


def peak(requests: list[tuple[float, float]]) -> int:
    """The most requests the server held at once."""
    edges = sorted([(start, 1) for start, _ in requests] + [(end, -1) for _, end in requests])
    held = most = 0
    for _, step in edges:
        held += step
        most = max(most, held)
    return most


def steady_rate(requests: list[tuple[float, float]], in_flight: int) -> float:
    """Replies per second at the server while the engine kept its requests out: from the arrival of
    the ``in_flight``-th request to that of the last one.  A finite run also has a ramp (the first
    wave goes out while seeds are evaluated) and a drain (slots fall idle once the budget is covered,
    and with a fixed latency a slot that takes one request more than the others ends the run a
    whole latency later); this window leaves both out.  An engine that sent a request the moment
    another came back would reach in-flight / latency in it."""
    if len(requests) <= in_flight:
        return 0.0
    start, end = requests[in_flight - 1][0], requests[-1][0]
    return sum(start < done <= end for _, done in requests) / (end - start) if end > start else 0.0


def rates(r: dict, theory: float) -> str:
    return (f"{r['proposal_rate']:.2f} | {r['proposal_rate'] / theory:.1%} | {r['steady_rate']:.2f} | "
            f"{r['steady_rate'] / theory:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--prepared", type=int, nargs="+", default=[None],
                        help="run.prepared_per_island: proposals ready per island beyond its requests in flight "
                             "(default: the engine's, a quarter of them)")
    parser.add_argument("--waves", type=int, default=20, help="children per latency run: waves x in flight")
    parser.add_argument("--zero-latency-children", type=int, default=1000, help="0: no zero-latency rows")
    parser.add_argument("--ray", action="store_true", help="also measure with Ray island actors")
    parser.add_argument("--transport", choices=["auto", "litellm", "http"], default="auto",
                        help="llm.transport of the client (auto: http for this OpenAI-compatible endpoint)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = [
        "# Proposal-rate benchmark", "",
        f"`python -m experiments.proposal_rate_bench` on {platform.node()} ({os.cpu_count()} CPUs, "
        f"{platform.processor() or platform.machine()}), Python {platform.python_version()}; "
        f"load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}.", "",
        "Scripted server in its own process; real run loop, islands (2), LLM operators (diff, rewrite) "
        f"through llm.transport={args.transport}, local backend, trivial evaluator.  *peak*: the most "
        "requests the server held at once.", "",
        "| latency | in flight | prepared | proposals | peak | theoretical /s | whole run /s | of theoretical "
        "| steady /s | of theoretical |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    warm = Server(0.0)
    measure(children=20, in_flight=4, api_base=warm.api_base, transport=args.transport)  # imports, warms the pool
    for k in args.in_flight:
        server, theory = Server(args.latency), k / args.latency
        for prepared in args.prepared:
            for ray in (False, True) if args.ray else (False,):
                server.requests()
                r = measure(children=args.waves * k, in_flight=k, api_base=server.api_base, ray=ray,
                            transport=args.transport, prepared=prepared)
                if prepared is None:
                    prepared = RunSettings(dir="", proposals_per_island=max(1, k // 2)).prepared
                requests = server.requests()
                r["steady_rate"], most = steady_rate(requests, k), peak(requests)
                lines.append(f"| {args.latency:g} s{' (Ray islands)' if ray else ''} | {k} | {prepared} | "
                             f"{r['proposals']} | {most} | {theory:.2f} | {rates(r, theory)} |")
                print(lines[-1], flush=True)
                if most > k:
                    raise SystemExit(f"the server held {most} requests at once, more than the {k} in flight")
        server.stop()
    llm = f"LLM (diff, rewrite) via {args.transport}"
    zero = ((llm, warm.api_base, 32), (llm, warm.api_base, 8), ("offline (constants)", None, 4))
    if args.zero_latency_children:
        lines += ["", "Zero latency, trivial evaluator: the engine's own rate (children evaluated per second of wall "
                  "time, seeds and start-up included).", "",
                  "| path | in flight | children | wall s | children /s |", "| --- | --- | --- | --- | --- |"]
    for label, base, k in zero if args.zero_latency_children else ():
        r = measure(children=args.zero_latency_children, in_flight=k, api_base=base, transport=args.transport)
        lines.append(f"| {label} | {k} | {r['children']} | {r['wall_s']:.1f} | {r['child_rate']:.1f} |")
        print(lines[-1], flush=True)
    warm.stop()
    lines += ["", f"Load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

"""What the pipeline benchmark records during a run, and the figures and table it makes of it.

``TimedBackend`` wraps any backend (local or Ray) and notes, from the run
loop's side, when each evaluation was handed to which evaluator and when its
result came back, and when each proposal went out and came back with which
LLM calls.  ``figures`` turns those records into rates, busy fractions,
in-flight counts and CPU per child; ``table`` renders them.
"""
from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import Future


class TimedBackend:
    """A backend that records every proposal and evaluation; ``seeds`` tells seeds from children."""

    def __init__(self, inner, seeds: set[str]):
        self.inner = inner
        self.seeds = seeds
        self.origin = time.monotonic()  # records hold seconds since this moment
        self.evaluations: list[dict] = []
        self.proposals: list[dict] = []
        self._lock = threading.Lock()  # callbacks run on the backend's threads

    def __getattr__(self, name: str):  # the rest of islands.backend.Backend: the inner backend's
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def now(self) -> float:
        return time.monotonic() - self.origin

    def propose(self, island: int, context) -> Future:
        start = self.now()
        future = self.inner.propose(island, context)

        def done(f: Future) -> None:
            proposal = None if f.exception() else f.result()
            record = {"island": island, "start": start, "end": self.now(),
                      "child": proposal is not None and proposal.source is not None,
                      "llm_latency_s": [c["latency_s"] for c in proposal.llm_calls] if proposal else []}
            with self._lock:
                self.proposals.append(record)

        future.add_done_callback(done)
        return future

    def evaluate(self, slot: int, task_name: str, task_source: str, source: str, race_bar=None) -> Future:
        start = self.now()
        future = self.inner.evaluate(slot, task_name, task_source, source, race_bar)

        def done(f: Future) -> None:
            result = None if f.exception() else f.result()
            record = {"worker": slot, "task": task_name, "start": start, "end": self.now(),
                      "child": source not in self.seeds, "wall_s": result.wall_s if result else 0.0,
                      "status": result.status.value if result else "lost"}
            with self._lock:
                self.evaluations.append(record)

        future.add_done_callback(done)
        return future



def _overlap(start: float, end: float, lo: float, hi: float) -> float:
    return max(0.0, min(end, hi) - max(start, lo))


def _busy(records: list[dict], workers: int, lo: float, hi: float) -> list[dict]:
    """Per evaluator, the share of [lo, hi] with an evaluation under way on it.

    ``handed_over``: from handing the program to the evaluator until its result was back (run loop's
    view: includes transfers and the host side).  ``sandbox``: the evaluation's own ``wall_s``
    (measured inside the sandbox), placed to end when its result came back.
    """
    span = max(hi - lo, 1e-9)
    return [{"worker": w,
             "evaluations": sum(1 for r in records if r["worker"] == w and _overlap(r["start"], r["end"], lo, hi)),
             "handed_over": sum(_overlap(r["start"], r["end"], lo, hi) for r in records if r["worker"] == w) / span,
             "sandbox": sum(_overlap(r["end"] - r["wall_s"], r["end"], lo, hi) for r in records
                            if r["worker"] == w) / span}
            for w in range(workers)]


def _per_hour(count: int, seconds: float) -> float | None:
    return 3600 * count / seconds if seconds > 0 else None


def figures(backend: TimedBackend, samples: list[dict], run: tuple[float, float], cpu: dict) -> dict:
    """Everything measured in one configuration; times in seconds since the backend was made.

    ``samples``: the run loop's in-flight counts at each evaluation's end (``evaluated`` events);
    ``run``: when the run loop started and ended; ``cpu``: CPU seconds spent by the engine's processes.
    """
    evaluations = sorted(backend.evaluations, key=lambda r: r["start"])
    children = [r for r in evaluations if r["child"]]
    run_start, run_end = run
    run_s = run_end - run_start
    first, last = min(r["start"] for r in evaluations), max(r["end"] for r in evaluations)
    child_lo = min((r["start"] for r in children), default=run_end)
    child_hi = max((r["end"] for r in children), default=run_end)
    ends = sorted(r["end"] for r in children)
    # Steady state: completions after the first child's, over the time since it (no start or end edge).
    steady = _per_hour(len(ends) - 1, ends[-1] - ends[0]) if len(ends) > 1 else None
    latencies = [s for p in backend.proposals for s in p["llm_latency_s"]]
    workers = backend.slot_count
    busy = _busy(evaluations, workers, child_lo, child_hi)
    sampled = {key: [s.get(key, 0) for s in samples] for key in ("proposals", "llm_requests", "queued")}
    return {
        "children": len(children), "seeds": len(evaluations) - len(children),
        "correct_children": sum(r["status"] == "correct" for r in children),
        "run_s": run_s, "first_child_handed_over_s": child_lo - run_start,
        "evaluation_window_s": last - first, "child_window_s": child_hi - child_lo,
        "children_per_hour": {"steady": steady, "child_window": _per_hour(len(children), child_hi - child_lo),
                              "run": _per_hour(len(children), run_s)},
        "evaluations_per_hour_evaluation_window": _per_hour(len(evaluations), last - first),
        "busy_child_window": busy,
        "busy_evaluation_window": _busy(evaluations, workers, first, last),
        "busy_mean": statistics.fmean(b["handed_over"] for b in busy),
        "sandbox_busy_mean": statistics.fmean(b["sandbox"] for b in busy),
        "evaluation_round_trip_mean_s": statistics.fmean(r["end"] - r["start"] for r in children) if children else None,
        "evaluation_wall_mean_s": statistics.fmean(r["wall_s"] for r in children) if children else None,
        "proposals": len(backend.proposals), "proposals_with_child": sum(p["child"] for p in backend.proposals),
        "proposal_mean_s": statistics.fmean(p["end"] - p["start"] for p in backend.proposals)
        if backend.proposals else None,
        # Little's law: the time-weighted mean in flight is the summed durations over the run's length.
        "proposals_in_flight_mean": sum(_overlap(p["start"], p["end"], run_start, run_end)
                                        for p in backend.proposals) / run_s,
        "proposals_in_flight_max_sampled": max(sampled["proposals"], default=0),
        "queued_mean_sampled": statistics.fmean(sampled["queued"]) if samples else 0.0,
        "queued_max_sampled": max(sampled["queued"], default=0),
        "llm": {"requests": len(latencies), "mean_latency_s": statistics.fmean(latencies) if latencies else None,
                "in_flight_mean": sum(latencies) / run_s,
                "in_flight_max_sampled": max(sampled["llm_requests"], default=0)},
        "cpu_s": cpu,
        "cpu_ms_per_child": {k: 1e3 * v / len(children) for k, v in {**cpu, "total": sum(cpu.values())}.items()}
        if children else {},
        "evaluation_records": evaluations,
    }


def _fmt(value, spec: str = ".0f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def ratios(results: list[dict]) -> list[dict]:
    """Two evaluators over one, for every island count (and proposals per island) measured with both."""
    by = {(r["islands"], r["proposals_per_island"], r["evaluators"]): r for r in results if "figures" in r}
    out = []
    for (islands, per_island, evaluators), two in sorted(by.items()):
        one = by.get((islands, per_island, 1))
        if evaluators != 2 or one is None:
            continue
        rate2, rate1 = two["figures"]["children_per_hour"], one["figures"]["children_per_hour"]
        out.append({"islands": islands, "proposals_per_island": per_island,
                    **{k: rate2[k] / rate1[k] if rate2[k] and rate1[k] else None
                       for k in ("steady", "child_window", "run")}})
    return out


def table(results: list[dict]) -> str:
    lines = ["| islands | evaluators | in flight per island | children (correct) | child window | "
             "children/h: steady, window, run | busy per evaluator: handed over (sandbox) | "
             "proposals in flight: mean, max | queued: mean, max | LLM: in flight mean, latency | "
             "engine CPU per child: driver + islands + evaluator hosts = total |",
             "| ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        f = r.get("figures")
        if f is None:
            lines.append(f"| {r['islands']} | {r['evaluators']} | {r['proposals_per_island']} | "
                         f"failed: {r.get('error', '?')[:80]} | | | | | | | |")
            continue
        rate, cpu = f["children_per_hour"], f["cpu_ms_per_child"]
        busy = ", ".join(f"{b['handed_over']:.0%} ({b['sandbox']:.0%})" for b in f["busy_child_window"])
        parts = [f"{cpu[k]:.0f}" if k in cpu else "-" for k in ("driver", "islands", "evaluator_hosts", "total")]
        lines.append(
            f"| {r['islands']} | {r['evaluators']} | {r['proposals_per_island']} | {f['children']} "
            f"({f['correct_children']}) | {f['child_window_s']:.0f} s | {_fmt(rate['steady'])}, "
            f"{_fmt(rate['child_window'])}, {_fmt(rate['run'])} | {busy} | {f['proposals_in_flight_mean']:.1f}, "
            f"{f['proposals_in_flight_max_sampled']} | {f['queued_mean_sampled']:.1f}, {f['queued_max_sampled']} | "
            f"{f['llm']['in_flight_mean']:.1f}, {_fmt(f['llm']['mean_latency_s'], '.2f')} s | "
            f"{' + '.join(parts[:3])} = {parts[3]} ms |")
    for q in ratios(results):
        lines += ["", f"Two evaluators over one at {q['islands']} islands ({q['proposals_per_island']} proposals "
                      f"in flight per island): steady {_fmt(q['steady'], '.2f')}x, "
                      f"child window {_fmt(q['child_window'], '.2f')}x, whole run {_fmt(q['run'], '.2f')}x "
                      "(target: at least 1.9x)"]
    return "\n".join(lines) + "\n"

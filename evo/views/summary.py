"""The end-of-run table, and the tables of ``evo status``: per task, per operator, LLM spend."""
from __future__ import annotations

from rich.table import Table

from archive import Archive


def summary_rows(archive: Archive, task_names: list[str]) -> list[dict]:
    return [dict(task=name, **archive.stats(name)) for name in task_names]


def _x(value: float | None) -> str:
    return f"{value:.3f}x" if value is not None else "-"


def _pct(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


def _table(title: str | None, columns: tuple[str, ...], rows: list[tuple], caption: str | None = None) -> Table:
    table = Table(title=title, caption=caption)
    for column in columns:
        table.add_column(column, justify="left" if column in ("task", "operator", "model") else "right")
    for row in rows:
        table.add_row(*row)
    return table


def summary_table(rows: list[dict], *, title: str) -> Table:
    return _table(title, ("task", "evals", "correct", "seed", "best", "cells", "coverage"),
                  [(r["task"], str(r["evaluations"]), str(r["correct"]), _x(r["seed_speedup"]),
                    _x(r["best_speedup"]), str(r["cells"]), _pct(r["coverage"])) for r in rows],
                  caption="seed, best: speedup over the PyTorch reference")


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _floor(row: dict) -> str:
    return "-" if row.get("floor_ms") is None else f"{row['floor_ms']:.3g} ({row.get('bound') or '?'})"


def status_table(rows: list[dict], *, title: str) -> Table:
    """Per task: programs, evaluations, correct rate, best speedup, the fastest kernel's time beside
    torch.compile's and the roofline's floor, coverage, QD-score."""
    return _table(title, ("task", "programs", "evals", "correct", "best", "best ms", "compile ms", "floor ms",
                          "coverage", "QD-score"),
                  [(r["task"], str(r["programs"]), str(r["evaluations"]),
                    _pct(r["correct"] / r["evaluations"] if r["evaluations"] else None), _x(r["best_speedup"]),
                    _ms(r.get("best_ms")), _ms(r.get("compiled_ms")), _floor(r),
                    f"{r['cells']} ({_pct(r['coverage'])})", f"{r['qd_score']:.3f}") for r in rows],
                  caption="correct: share of evaluations; best: speedup over the PyTorch reference; best ms: "
                          "that kernel's time, compile ms: torch.compile's for the same shapes; floor ms: the "
                          "time no kernel can beat (bytes over bandwidth, FLOPs over the peak for the dtype) "
                          "and whether memory or compute sets it; QD-score: sum of the elites' speedups")


def operator_table(rows: list[dict]) -> Table:
    return _table(None, ("operator", "programs", "evaluated", "correct", "rejected", "success"),
                  [(r["operator"], str(r["programs"]), str(r["evaluated"]), str(r["correct"]), str(r["rejected"]),
                    _pct(r["rate"])) for r in rows],
                  caption="rejected: near-duplicates of a program of their task, not evaluated (novelty.*); "
                          "success: correct over evaluated and rejected")


def novelty_line(rejected: dict[str, int]) -> str:
    """What novelty rejection saved: the children it kept from the evaluators."""
    n = sum(rejected.values())
    by = ", ".join(f"{op} {k}" for op, k in sorted(rejected.items()))
    return (f"novelty rejection: {n} {'child' if n == 1 else 'children'} not evaluated (saved ~{n} "
            f"evaluation{'' if n == 1 else 's'})" + (f": {by}" if by else ""))


def model_table(rows: list[dict]) -> Table:
    return _table(None, ("model", "calls", "failed", "correct", "cost"),
                  [(r["model"], str(r["calls"]), str(r["errors"]), _pct(r["rate"]), f"${r['cost_usd']:.4f}")
                   for r in rows])


def fragment_table(rows: list[dict], shown: int = 5) -> Table:
    """The meta-prompt pool's best fragments (``operators.meta_prompt.table``)."""
    return _table(None, ("fragment", "children", "improved", "rate", "advice"),
                  [(str(r["id"]), str(r["children"]), str(r["improvements"]), _pct(r["rate"]),
                    r["text"] if len(r["text"]) <= 160 else r["text"][:157] + "...") for r in rows[:shown]],
                  caption=f"meta-prompt evolution: the best {min(shown, len(rows))} of {len(rows)} fragments "
                          "(rate: posterior mean share of children that improved)")


def fast_p_table(rows: list[dict], tolerance: str) -> Table:
    """Per group of tasks (a folder of problem files): KernelBench's fast_p and geometric-mean speedups."""
    from evo.views.fast_p import P_VALUES, TOLERANCE_NOTES

    def mean(value, n):
        return f"{_x(value)} ({n})" if value is not None else "-"

    return _table(None, ("group", "tasks", "set aside", *(f"fast_{p:g}" for p in P_VALUES), "geomean eager",
                         "geomean compiled"),
                  [(r["group"], str(r["tasks"]), str(r["set_aside"]), *(_pct(r["fast_p"][p]) for p in P_VALUES),
                    mean(r["geomean"], r["geomean_n"]), mean(r["geomean_compiled"], r["geomean_compiled_n"]))
                   for r in rows],
                  caption=f"fast_p: share of the group's tasks with a correct kernel faster than eager by more "
                          f"than p; geomeans over the (n) tasks with a correct kernel, each its fastest; "
                          f"checked with {TOLERANCE_NOTES.get(tolerance, tolerance)}")


_PHASES = (("host_s", "start and transfer"), ("load_s", "load"), ("checks_s", "checks"), ("timing_s", "timing"))
# The parts of load, checks and timing that the harness times on its own (evaluator.harness).
_PARTS = (("cuda_init_s", "CUDA context"), ("reference_s", "reference"), ("smoke_s", "smoke test and JIT"),
          ("adversarial_s", "adversarial values"), ("shapes_s", "shapes and seeds"), ("inputs_s", "timing inputs"),
          ("baseline_compile_s", "torch.compile baseline"), ("interleaved_s", "timing loop"),
          ("timed_checks_s", "timed-call checks"), ("roofline_s", "roofline"), ("shape_timings_s", "per-shape timing"),
          ("reverify_s", "re-verification"), ("state_s", "interpreter state compared"), ("oom_retry_s", "out of GPU memory beside others, before trying alone"),
          # In a pipeline: stopped while another evaluation timed (evaluator.gate), and queued for a worker.
          ("start_gate_wait_s", "waiting after the start"), ("compile_gate_wait_s", "waiting after a compile"),
          ("gate_wait_s", "waiting to time"), ("queued_s", "queued for a worker"))


def phase_line(totals: dict) -> str | None:
    """Where the evaluators' time went: seconds per phase and the share spent in the timed calls
    themselves (GPU time on a GPU), the rest being the harness around them."""
    n, seconds = totals["evaluations"], totals["seconds"]
    whole = seconds.get("total_s")
    if not n or not whole:
        return None
    parts = ", ".join(f"{label} {seconds[key]:.0f} s ({seconds[key] / whole:.0%})"
                      for key, label in _PHASES if key in seconds)
    timed = seconds.get("timed_calls_s", 0.0)
    within = ", ".join(f"{label} {seconds[key] / n:.2f}" for key, label in _PARTS if key in seconds)
    under_way = totals.get("under_way_s") or 0.0
    # Evaluations in flight together (a pipeline, several GPUs) count their time each: the wall
    # time with one under way says what the run paid.
    overlap = (f"; evaluations overlapping, {under_way:.0f} s of wall time had one under way "
               f"({60 * n / under_way:.1f} per minute of it)") if 0 < under_way < 0.95 * whole else ""
    return (f"evaluator time: {whole:.0f} s for {n} evaluations ({60 * n / whole:.1f} per evaluator-minute, "
            f"{whole / n:.1f} s each): {parts}; in timed calls {timed:.0f} s ({timed / whole:.0%} of it){overlap}"
            + (f"; seconds per evaluation in: {within}" if within else ""))


def racing_line(counts: dict[str, int]) -> str | None:
    """How racing timed the run's children (evaluator.race): kept short, or timed in full."""
    raced = counts["short"] + counts["full"]
    if not raced:
        return None
    return (f"racing: {raced} children raced against their parent; {counts['short']} clearly slower kept a short "
            f"timing round, {counts['full']} timed in full ({counts['from_short']} going on from their short round)")


def timed_checks_line(counts: dict) -> str | None:
    """What the correct results' timed calls were held to (evaluator.timed_checks): how many took
    input values drawn afresh on every timed call, and why the others did not."""
    if not counts["correct"]:
        return None
    unchecked = counts["correct"] - counts["checked"]
    line = (f"timed checks: {counts['checked']} of {counts['correct']} correct results checked on their timed "
            f"calls; inputs drawn afresh for every timed call in {counts['fresh']}")
    if counts["off"]:
        reasons = sorted(counts["off"].items(), key=lambda kv: (-kv[1], kv[0]))
        shown = "; ".join(f"{n}: {why}" for why, n in reasons[:3])
        more = f"; {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""
        line += f", not in {sum(counts['off'].values())} ({shown}{more})"
    if counts["audited"]:
        line += f"; held to an audited call's device time in {counts['audited']}"
    if unchecked:
        line += f"; {unchecked} recorded before schema 11 or without timed checks"
    return line

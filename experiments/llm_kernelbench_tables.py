"""The scores of ``experiments/llm_kernelbench.py``: per-problem records summed up as KernelBench reports
them (``evo.views.fast_p``), with tokens and dollars, written as ``results.json`` and ``results.md`` and
printed."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evo.views.fast_p import P_VALUES, TOLERANCE_NOTES, fast_p_rows

SHOWN_P = (0.0, 1.0, 2.0)  # the columns of the printed tables; the JSON has every p of P_VALUES
CONVENTIONS = {
    "fast_p": "share of the problems with a correct kernel whose speedup is above p (KernelBench's fastp: "
              "correct and faster than p, over all problems; fast_0 is the correctness rate); over "
              "torch.compile, the same kernel's speedup over torch.compile's time for the same inputs",
    "kernel": "each problem's fastest correct kernel of its search (by speedup over eager)",
    "geomean": "geometric mean over the problems with a correct kernel (KernelBench's "
               "geometric_mean_speed_ratio_correct_only)",
    "geomean_all": "geometric mean over every problem, one without a correct kernel counted as 1.0x (the "
                   "user keeps the baseline it is compared with)",
    "llm_calls": "request attempts recorded in each run's llm_calls table, failed ones included; the budget "
                 "counts a request once with its retries, so llm_calls can exceed it by the retries",
    "usd": "from llm.prices where it names the model, else litellm's cost data (0 for a model it does not price)",
}


def _totals(rows: list[dict]) -> dict:
    n = len(rows)
    total = {k: sum(r[k] for r in rows) for k in ("llm_calls", "llm_errors", "prompt_tokens", "completion_tokens")}
    usd = sum(r["usd"] for r in rows)
    tokens = total["prompt_tokens"] + total["completion_tokens"]
    return dict(problems=n, **total, tokens=tokens, usd=round(usd, 6),
                usd_per_problem=round(usd / n, 6) if n else None, tokens_per_problem=round(tokens / n) if n else None,
                wall_s=round(sum(r["wall_s"] for r in rows), 1), timed_out=sum(bool(r["timed_out"]) for r in rows))


def summarize(rows: list[dict], meta: dict) -> dict:
    """The whole result: ``meta`` (command, model, ...), the engine and devices the runs recorded, per group
    (level, and ``all`` with several) fast_p and geomeans, the totals and every problem's record."""
    bests = [dict(task=r["problem"], group=r["group"], set_aside=bool(r["set_aside"]), speedup=r["speedup"],
                  speedup_vs_compiled=r["speedup_vs_compiled"]) for r in rows]
    groups = fast_p_rows(bests) if rows else []
    for group in groups:
        members = [r for r in rows if group["group"] in ("all", r["group"])]
        group.update(_totals(members))
    engines = sorted({r["engine"] for r in rows if r.get("engine")})
    tolerances = sorted({r["tolerance"] for r in rows if r.get("tolerance")})
    # The timing device as the evaluations name it (a GPU's model); without a correct kernel, cuda or cpu.
    devices = sorted({r["device"] for r in rows if r.get("device")}) or \
        sorted({r["device_kind"] for r in rows if r.get("device_kind")})
    return dict(meta, engine=engines, devices=devices,
                tolerance=tolerances, conventions=CONVENTIONS, totals=_totals(rows), groups=groups, problems=rows)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _x(value) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _fast(row: dict, key: str, p: float) -> str:
    return "-" if row[key] is None else _pct(row[key][p])


SUMMARY_COLUMNS = ("level", "problems", *(f"fast_{p:g} eager" for p in SHOWN_P),
                   *(f"fast_{p:g} compile" for p in SHOWN_P), "geomean eager", "geomean compile",
                   "geomean eager (all)", "tokens/problem", "$/problem", "$ total")


def summary_cells(g: dict) -> list[str]:
    return [g["group"], str(g["tasks"]), *(_fast(g, "fast_p", p) for p in SHOWN_P),
            *(_fast(g, "fast_p_compiled", p) for p in SHOWN_P),
            f"{_x(g['geomean'])} ({g['geomean_n']})", f"{_x(g['geomean_compiled'])} ({g['geomean_compiled_n']})",
            _x(g["geomean_all"]), str(g["tokens_per_problem"]), f"{g['usd_per_problem']:.4f}", f"{g['usd']:.4f}"]


PROBLEM_COLUMNS = ("problem", "correct", "vs eager", "vs compile", "LLM calls", "tokens in", "tokens out", "$",
                   "wall s", "note")


def problem_cells(r: dict) -> list[str]:
    note = "timed out" if r["timed_out"] else (r["set_aside"] or r["error"] or "")
    calls = f"{r['llm_calls']}" + (f" ({r['llm_errors']} failed)" if r["llm_errors"] else "")
    return [r["problem"], "yes" if r["correct"] else "no", _x(r["speedup"]), _x(r["speedup_vs_compiled"]), calls,
            str(r["prompt_tokens"]), str(r["completion_tokens"]), f"{r['usd']:.4f}", f"{r['wall_s']:.0f}",
            note if len(note) <= 80 else note[:77] + "..."]


def _header(result: dict) -> list[str]:
    tolerance = ", ".join(TOLERANCE_NOTES.get(t, t) for t in result["tolerance"]) or "-"
    return [*result["warnings"],
            f"model {result['model']}" + (f" at {result['api_base']}" if result["api_base"] else "")
            + f"; {result['calls_per_problem']} LLM calls per problem; {result['search']}",
            f"device {', '.join(result['devices']) or result['device']}; engine {', '.join(result['engine']) or '?'}; "
            f"{result['date']}; checked with {tolerance}",
            f"command: {result['command']}"]


def markdown(result: dict) -> str:
    def table(columns, rows) -> list[str]:
        return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
                *("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows)]

    t = result["totals"]
    lines = [f"# KernelBench with {result['model']}", "", *(f"{line}  " for line in _header(result)), "",
             *table(SUMMARY_COLUMNS, [summary_cells(g) for g in result["groups"]]), "",
             f"{t['problems']} problems, {t['llm_calls']} LLM calls ({t['llm_errors']} failed), "
             f"{t['prompt_tokens']} prompt and {t['completion_tokens']} completion tokens, ${t['usd']:.4f} "
             f"(${t['usd_per_problem']:.4f} a problem), {t['wall_s']:.0f} s of runs.", "",
             *(f"- {key}: {text}" for key, text in result["conventions"].items()), "",
             "## Per problem", "", *table(PROBLEM_COLUMNS, [problem_cells(r) for r in result["problems"]])]
    return "\n".join(lines) + "\n"


def _rich(title: str | None, columns, rows) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column in ("level", "problem", "note") else "right")
    for row in rows:
        table.add_row(*row)
    return table


def write_results(out: Path, result: dict, console: Console | None = None) -> None:
    """``results.json`` and ``results.md`` under ``out``; the tables printed."""
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "results.md").write_text(markdown(result))
    # Piped or captured output keeps every column whole; a terminal wraps them at its width.
    console = console or Console(width=None if sys.stdout.isatty() else 220)
    console.print(_rich("per problem", PROBLEM_COLUMNS, [problem_cells(r) for r in result["problems"]]))
    console.print(_rich(f"KernelBench: {result['model']}, {result['calls_per_problem']} LLM calls per problem",
                        SUMMARY_COLUMNS, [summary_cells(g) for g in result["groups"]]))
    for line in _header(result):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    console.print(f"written: {out / 'results.json'}, {out / 'results.md'}", soft_wrap=True, markup=False)


__all__ = ["P_VALUES", "summarize", "write_results", "markdown"]

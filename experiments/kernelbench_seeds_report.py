"""The report of ``kernelbench_seeds.py``'s records: each problem's outcome, and the markdown table
(read also by ``kernelbench_seeds_targets.py``, which needs no GPU nor the engine to merge records)."""
from __future__ import annotations

import statistics


def outcome(row: dict) -> tuple[str, str]:
    """(seed status, reason) of one problem: no seed, or the timed evaluation's or the check's verdict."""
    if not row.get("seed"):
        return "no seed", row.get("derive", {}).get("error", "not derived")
    for key in ("eval", "check"):
        record = row.get(key)
        if record and record["status"] != "not timed":
            return record["status"], record.get("reason", "") if record["status"] != "correct" else ""
    return "derived", ""


def _ratio(value) -> str:
    return f"{value:.3f}x" if value else "-"


def _memory(record: dict | None) -> str:
    memory = (record or {}).get("memory") or {}
    if "peak_mb" in memory and "reference_peak_mb" in memory:
        return f"{memory['peak_mb']:.0f} / {memory['reference_peak_mb']:.0f}"
    return "-"


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"Device: {meta.get('device', '?')}; torch {meta.get('torch')}, triton {meta.get('triton')}; "
             f"command: `{meta['command']}`", ""]
    levels = sorted({r["level"] for r in rows})
    lines += ["| level | problems | seed derived | checked | seed correct | median speedup (eager) | "
              "median vs torch.compile |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for level in levels:
        mine = [r for r in rows if r["level"] == level]
        derived = sum(1 for r in mine if r.get("seed"))
        checked = sum(1 for r in mine if outcome(r)[0] not in ("no seed", "derived"))
        correct = sum(1 for r in mine if outcome(r)[0] == "correct")
        speedups = [r["eval"]["speedup"] for r in mine if (r.get("eval") or {}).get("speedup")]
        versus = [r["eval"]["speedup_vs_compiled"] for r in mine if (r.get("eval") or {}).get("speedup_vs_compiled")]
        lines.append(f"| {level} | {len(mine)} | {derived} | {checked} | {correct} ({100 * correct / len(mine):.0f}%) | "
                     f"{_ratio(statistics.median(speedups)) if speedups else '-'} | "
                     f"{_ratio(statistics.median(versus)) if versus else '-'} |")
    for level in levels:
        lines += ["", f"## {level}", "", "| problem | seed | speedup | vs compile | peak MB seed / ref | "
                  "derived at s | eval s | reason |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in (r for r in rows if r["level"] == level):
            status, reason = outcome(r)
            ev = r.get("eval") or {}
            lines.append(f"| {r['name'].split('/', 1)[1]} | {status} | {_ratio(ev.get('speedup'))} | "
                         f"{_ratio(ev.get('speedup_vs_compiled'))} | {_memory(ev or r.get('check'))} | "
                         f"{r.get('derive', {}).get('seconds', '-')} | "
                         f"{ev.get('wall_s') and round(ev['wall_s'], 1) or '-'} | "
                         f"{reason[:160].replace('|', '/')} |")
    return "\n".join(lines) + "\n"

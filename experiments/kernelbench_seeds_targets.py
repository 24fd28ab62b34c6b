"""Deliverable 1 of issue 33 over whole KernelBench levels: records of ``kernelbench_seeds.py``
merged, each problem classed, and its seed's time set against the target for its class.

    python3 experiments/kernelbench_seeds_targets.py A.json B.json ... --out DIR [--title TEXT]

Records are read in order; a later record of a problem replaces an earlier one where it has
a seed the earlier lacks or an evaluation that was timed (so a record of twins timed from
``--seeds-from`` replaces the exact seed's).  Classes, read from the problem's source:
``vendor`` where the reference calls a product or a convolution (torch.compile hands these to
cuBLAS, cuDNN or flash attention: at most 1.5x its time), ``triton`` otherwise (at most 1.1x).
Writes ``seeds.json`` (merged, seeds included, for ``--seeds-from``) and ``seeds.md``.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kernelbench_seeds_report import outcome  # noqa: E402

TARGETS = {"triton": 1.1, "vendor": 1.5}  # seed time over torch.compile's, at most
VENDOR_CALL = re.compile(r"nn\.(Conv|ConvTranspose)[123]d|nn\.Linear\b|torch\.(matmul|bmm|mm|einsum|"
                         r"baddbmm|addmm|tensordot)\b|\s@\s|scaled_dot_product_attention|(F|functional)\.(conv|linear)")


def problem_class(source: str) -> str:
    """``vendor`` where the reference calls a product or a convolution, ``triton`` otherwise."""
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())  # comments name ops too
    code = re.sub(r'"""[\s\S]*?"""', "", code)
    return "vendor" if VENDOR_CALL.search(code) else "triton"


def _timed(row: dict) -> bool:
    return (row.get("eval") or {}).get("status", "not timed") != "not timed"


def merge(paths: list[str]) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for path in paths:
        for row in json.loads(Path(path).read_text())["problems"]:
            old = rows.get(row["name"])
            if old is None or (row.get("seed") and not old.get("seed")) or _timed(row) \
                    or (row.get("seed") and row.get("seed") != old.get("seed")):
                rows[row["name"]] = row
    return dict(sorted(rows.items(), key=lambda kv: (kv[1]["level"], int(kv[0].split("/")[1].split("_")[0]))))


def ratio(row: dict) -> float | None:
    """The seed's time over torch.compile's (the record's best kernel)."""
    speedup = (row.get("eval") or {}).get("speedup_vs_compiled")
    return 1.0 / speedup if row.get("eval", {}).get("status") == "correct" and speedup else None


def winner(row: dict) -> str:
    """Which of the starting kernels the record kept, as "2/3" (the order of ``starting_kernels``)."""
    ev = row.get("eval") or {}
    per = ev.get("per_kernel") or []
    for i, k in enumerate(per):
        if k.get("runtime_ms") == ev.get("runtime_ms"):
            return f"{i + 1}/{len(per)}"
    return "-"


def summary(rows: dict[str, dict]) -> list[str]:
    lines = ["| class | problems | seed derived | seed correct | timed | seed / compile: target | met | median |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for cls, target in TARGETS.items():
        mine = [r for r in rows.values() if r["class"] == cls]
        derived = sum(1 for r in mine if r.get("seed"))
        correct = sum(1 for r in mine if outcome(r)[0] == "correct")
        ratios = [x for r in mine if (x := ratio(r)) is not None]
        met = sum(1 for x in ratios if x <= target)
        span = f" ({min(ratios):.2f}-{max(ratios):.2f}x)" if ratios else ""
        lines.append(f"| {cls} | {len(mine)} | {derived} | {correct} | {len(ratios)} | at most {target}x | "
                     f"**{met} of {len(ratios)}**{span} | {statistics.median(ratios):.3f}x |" if ratios else
                     f"| {cls} | {len(mine)} | {derived} | {correct} | 0 | at most {target}x | - | - |")
    return lines


def markdown(rows: dict[str, dict], title: str, sources: list[str]) -> str:
    lines = [f"# {title}", "", "Records merged, in order: " + ", ".join(f"`{s}`" for s in sources), "",
             "Seed time over torch.compile's: of the fastest correct kernel of those a run starts the task "
             "from (split-K, split-precision twin, exact seed; `kernel` says which, in that order).", ""]
    devices = sorted({(r.get("eval") or {}).get("device") for r in rows.values()} - {None})
    lines += [f"Devices: {', '.join(devices) or '-'}", ""] + summary(rows)
    misses = [(n, r) for n, r in rows.items() if (x := ratio(r)) is not None and x > TARGETS[r["class"]]]
    lines += ["", f"Misses ({len(misses)}): " + (", ".join(f"{n} {ratio(r):.2f}x" for n, r in misses) or "none")]
    other = [(n, outcome(r)) for n, r in rows.items() if ratio(r) is None]
    lines += ["", f"Not correct or not timed ({len(other)}): " +
              (", ".join(f"{n} ({status})" for n, (status, _) in other) or "none")]
    for level in sorted({r["level"] for r in rows.values()}):
        lines += ["", f"## {level}", "", "| problem | class | seed | seed / compile | met | kernel | reason |",
                  "| --- | --- | --- | ---: | --- | --- | --- |"]
        for name, r in rows.items():
            if r["level"] != level:
                continue
            status, reason = outcome(r)
            x = ratio(r)
            met = "-" if x is None else ("yes" if x <= TARGETS[r["class"]] else "**no**")
            lines.append(f"| {name.split('/', 1)[1]} | {r['class']} | {status} | "
                         f"{'-' if x is None else f'{x:.3f}x'} | {met} | {winner(r)} | "
                         f"{'' if status == 'correct' else reason[:140].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default="Seeds of KernelBench problems against torch.compile")
    args = parser.parse_args()
    rows = merge(args.records)
    for row in rows.values():
        row["class"] = problem_class(row.get("source") or Path(row["path"]).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "seeds.json").write_text(json.dumps({"sources": args.records, "problems": list(rows.values())}))
    (out / "seeds.md").write_text(markdown(rows, args.title, args.records))
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()

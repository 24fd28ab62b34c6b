"""The timed-call checks on a GPU: every cheat's verdict and reason, honest kernels' speedups, and
what the checks add to an evaluation's wall time.

    python experiments/integrity_gpu.py [--repeats 1] [--only honest:gelu,cheat:side_stream]     # JSON to $OUT/integrity_gpu.json (or stdout)

Two evaluators, each its own sandbox worker: ``checked`` (the defaults: timed calls verified, 3 input
sets) and ``unchecked`` (``verify_timed=false``, 1 input set: the evaluator before these checks).  Each
honest candidate is evaluated once by both to warm their compile caches, then ``--repeats`` times by
each, alternating, and the wall times (``EvalResult.wall_s``, measured inside the sandbox) compared;
each cheat is evaluated once by both (its verdict before and after the checks).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluator import Evaluator, EvaluatorSettings  # noqa: E402
from evo.task import load_tasks  # noqa: E402
from tests.integrity_cheats import (CAST_GLUE_DOES_THE_WORK, CAST_HONEST, CAST_TASK, gelu_cheats,  # noqa: E402
                                    row_sum_cheat)


def candidates() -> list[dict]:
    tasks = {t.name: t for t in load_tasks("default")}
    out = [{"name": f"honest:{t.name}", "task": t.name, "task_source": t.source, "source": t.seeds[0],
            "honest": True} for t in tasks.values()]
    out.append({"name": "honest:cast", "task": "cast", "task_source": CAST_TASK, "source": CAST_HONEST, "honest": True})
    gelu = tasks["gelu"]
    for name, (source, what) in gelu_cheats(gelu.seeds[0]).items():
        out.append({"name": f"cheat:{name}", "task": "gelu", "task_source": gelu.source, "source": source,
                    "what": what})
    out.append({"name": "cheat:cast_glue_does_the_work", "task": "cast", "task_source": CAST_TASK,
                "source": CAST_GLUE_DOES_THE_WORK, "what": "a useless launch; PyTorch's cast does the work"})
    out.append({"name": "cheat:row_sum_torch_sum", "task": "row_sum", "task_source": tasks["row_sum"].source,
                "source": row_sum_cheat(tasks["row_sum"].seeds[0]),
                "what": "a real launch, then torch.sum does the work"})
    return out


def record(result) -> dict:
    return {"status": result.status.value, "reason": result.reason[:400], "wall_s": round(result.wall_s, 3),
            "speedup": result.speedup, "speedup_noise": result.speedup_noise,
            "phases": result.extra.get("phases"), "timed_checks": result.extra.get("timed_checks")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated candidate names (default: all)")
    args = parser.parse_args()
    base = EvaluatorSettings(device="cuda", timeout_s=300)
    settings = {
        "checked": base,
        "unchecked": dataclasses.replace(base, verify_timed=False,
                                         timing=dataclasses.replace(base.timing, input_sets=1)),
    }
    evaluators = {name: Evaluator(s, "cuda", 0) for name, s in settings.items()}
    wanted = set(filter(None, args.only.split(",")))
    rows = []
    try:
        for cand in candidates():
            if wanted and cand["name"] not in wanted:
                continue
            runs = {name: [] for name in evaluators}
            # Honest kernels: a first round warms the compile caches, unrecorded; cheats: one round.
            for repeat in range(args.repeats + 1 if cand.get("honest") else 1):
                order = list(evaluators) if repeat % 2 == 0 else list(reversed(evaluators))
                for name in order:
                    result = evaluators[name].evaluate(cand["task"], cand["task_source"], cand["source"])
                    if repeat or not cand.get("honest"):
                        runs[name].append(record(result))
            row = {k: cand[k] for k in ("name", "task", "what", "honest") if k in cand}
            row.update(runs)
            if cand.get("honest"):
                walls = {name: statistics.median(r["wall_s"] for r in runs[name]) for name in runs}
                row["added_wall_fraction"] = round(walls["checked"] / walls["unchecked"] - 1, 4)
            rows.append(row)
            write_report(rows)
            print(f"{row['name']:36s} checked={runs['checked'][-1]['status']:13s} "
                  f"unchecked={runs['unchecked'][-1]['status']:13s} "
                  f"wall {runs['checked'][-1]['wall_s']:.2f}/{runs['unchecked'][-1]['wall_s']:.2f} s  "
                  f"speedup {runs['checked'][-1]['speedup']}/{runs['unchecked'][-1]['speedup']}  "
                  f"{runs['checked'][-1]['reason'][:110]}", file=sys.stderr, flush=True)
    finally:
        for ev in evaluators.values():
            ev.close()
    print(json.dumps(write_report(rows), indent=1))


def write_report(rows: list[dict]) -> dict:
    """The summary over the rows so far, and the JSON under $OUT rewritten with them: a call cut
    off by the device's time limit keeps every candidate it finished."""
    honest = [r for r in rows if r.get("honest")]
    summary = {}
    if honest:
        total = {name: sum(statistics.median(x["wall_s"] for x in r[name]) for r in honest)
                 for name in ("checked", "unchecked")}
        summary = {"honest_wall_s": total, "added_wall_fraction": round(total["checked"] / total["unchecked"] - 1, 4),
                   "honest_lost": [r["name"] for r in honest if r["checked"][-1]["status"] != "correct"]}
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "integrity_gpu.json").write_text(json.dumps({"summary": summary, "candidates": rows}, indent=1))
    return summary


if __name__ == "__main__":
    main()

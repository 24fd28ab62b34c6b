"""The timed-call checks on a GPU: every cheat's verdict and reason, honest kernels' speedups, and
what the checks add to an evaluation's wall time.

    python experiments/integrity_gpu.py [--repeats 1] [--only honest:gelu,cheat:side_stream] \\
        [--kernelbench .kbsrc/level1 .kbsrc/level2 [--derive-workers 4] [--only-kernelbench]]
        # JSON to $OUT/integrity_gpu.json (or stdout)

Two evaluators, each its own sandbox worker: ``checked`` (the defaults: timed calls verified, 3 input
sets) and ``unchecked`` (``verify_timed=false``, 1 input set: the evaluator before these checks).  Each
honest candidate is evaluated once by both to warm their compile caches, then ``--repeats`` times by
each, alternating, and the wall times (``EvalResult.wall_s``, measured inside the sandbox) compared;
each cheat is evaluated once by both (its verdict before and after the checks).

``--kernelbench DIR ...`` adds an honest candidate ``kb:<file stem>`` per problem file in those
folders: its seed derived from torch.compile on the GPU by the engine's own derivation
(``Evaluator.prepare``, as ``evo run`` starts; ``--derive-workers`` at once), by an evaluator of its
own, closed before the two above are made.  A problem whose reference fails or that gets no seed is
listed under the summary's ``not_seeded``, not evaluated.  ``--only-kernelbench``: no built-in
candidates nor cheats.  The summary's ``groups`` compares checked with unchecked per group of honest
candidates: ``builtin`` (``honest:*``) and ``kernelbench`` (``kb:*``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluator import Evaluator, EvaluatorSettings, Preparation  # noqa: E402
from evo.core.task import load_tasks  # noqa: E402
from tests.support.integrity_cheats import (CAST_GLUE_DOES_THE_WORK, CAST_HONEST, CAST_TASK,  # noqa: E402
                                            gelu_cheats, row_sum_cheat)

EVALUATORS = ("checked", "unchecked")
GROUPS = {"builtin": "honest:", "kernelbench": "kb:"}  # group -> the prefix of its candidates' names


def candidates() -> list[dict]:
    tasks = {t.name: t for t in load_tasks("default")}
    out = [{"name": f"honest:{t.name}", "task": t.name, "task_source": t.source, "source": t.seeds[0],
            "honest": True} for t in tasks.values()]
    out.append({"name": "honest:cast", "task": "cast", "task_source": CAST_TASK, "source": CAST_HONEST, "honest": True})
    gelu = tasks["gelu"]
    for name, (source, what) in gelu_cheats(gelu.seeds[0]).items():
        out.append({"name": f"cheat:{name}", "task": "gelu", "task_source": gelu.source, "source": source,
                    "what": what})
    from tests.support.integrity_cheats import gelu_watched_cheats  # round three: watched, and the reference altered

    for name, (source, what) in gelu_watched_cheats(gelu.seeds[0]).items():
        out.append({"name": f"cheat:{name}", "task": "gelu", "task_source": gelu.source, "source": source,
                    "what": what})
    out.append({"name": "cheat:cast_glue_does_the_work", "task": "cast", "task_source": CAST_TASK,
                "source": CAST_GLUE_DOES_THE_WORK, "what": "a useless launch; PyTorch's cast does the work"})
    out.append({"name": "cheat:row_sum_torch_sum", "task": "row_sum", "task_source": tasks["row_sum"].source,
                "source": row_sum_cheat(tasks["row_sum"].seeds[0]),
                "what": "a real launch, then torch.sum does the work"})
    return out


def kernelbench_candidates(folders: list[str], settings: EvaluatorSettings, workers: int,
                           wanted: set[str]) -> tuple[list[dict], list[dict]]:
    """The honest candidates ``kb:<stem>`` of the problem files in ``folders`` (those in ``wanted``, if
    any), each with its seed derived on the GPU (``Evaluator.prepare``'s stream, ``workers`` at once),
    and the problems not seeded, with the reason.  The deriving evaluator is closed before this returns."""
    problems: dict[str, Path] = {}
    for folder in folders:
        paths = sorted(Path(folder).glob("*.py"), key=lambda p: (len(p.stem.split("_")[0]), p.stem))
        if not paths:
            raise SystemExit(f"--kernelbench {folder}: no problem files (*.py) there")
        for path in paths:
            if wanted and f"kb:{path.stem}" not in wanted:
                continue
            if path.stem in problems:
                raise SystemExit(f"--kernelbench: two problems named {path.stem}: {problems[path.stem]}, {path}")
            problems[path.stem] = path
    if not problems:
        return [], []
    texts = {stem: path.read_text() for stem, path in problems.items()}
    outcomes: dict = {}  # stem -> PreparedTask
    deriver = Evaluator(dataclasses.replace(settings, warm_start=False), "cuda", 0)  # starts nothing
    try:
        for stem, outcome in deriver.prepare_stream([Preparation(s, t, True) for s, t in texts.items()], workers):
            outcomes[stem] = outcome
            print(f"derive kb:{stem}: {'ok' if outcome.seed and outcome.seed.ok else 'no seed'}", file=sys.stderr,
                  flush=True)
    finally:
        deriver.close()
    seeded, not_seeded = [], []
    for stem, path in problems.items():
        check, seed = outcomes[stem].check, outcomes[stem].seed
        if not check.ok:
            reason = f"the reference failed: {check.error}"
        elif not (seed and seed.ok):
            reason = f"no seed derived: {seed and seed.error}"
        else:
            seeded.append({"name": f"kb:{stem}", "task": stem, "task_source": texts[stem], "source": seed.source,
                           "honest": True, "path": str(path)})
            continue
        not_seeded.append({"name": f"kb:{stem}", "path": str(path), "reason": reason[:400]})
    return seeded, not_seeded


def record(result) -> dict:
    return {"status": result.status.value, "reason": result.reason[:400], "wall_s": round(result.wall_s, 3),
            "speedup": result.speedup, "speedup_noise": result.speedup_noise,
            "phases": result.extra.get("phases"), "timed_checks": result.extra.get("timed_checks")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated candidate names (default: all)")
    parser.add_argument("--kernelbench", nargs="+", metavar="DIR", default=[],
                        help="folders of KernelBench problem files: candidates kb:<stem> with derived seeds")
    parser.add_argument("--derive-workers", type=int, default=4, help="seeds derived at once (sandbox workers)")
    parser.add_argument("--only-kernelbench", action="store_true", help="no built-in candidates nor cheats")
    args = parser.parse_args()
    if args.only_kernelbench and not args.kernelbench:
        parser.error("--only-kernelbench needs --kernelbench DIR")
    if args.derive_workers < 1:
        parser.error("--derive-workers must be >= 1")
    base = EvaluatorSettings(device="cuda", timeout_s=300)
    settings = {
        "checked": base,
        "unchecked": dataclasses.replace(base, verify_timed=False,
                                         timing=dataclasses.replace(base.timing, input_sets=1)),
    }
    wanted = set(filter(None, args.only.split(",")))
    cands = [] if args.only_kernelbench else candidates()
    meta: dict = {}
    if args.kernelbench:  # before the timed evaluators exist: their warm start does not overlap it
        began = time.monotonic()
        seeded, meta["not_seeded"] = kernelbench_candidates(args.kernelbench, base, args.derive_workers, wanted)
        cands += seeded
        meta["kernelbench_derive_s"] = round(time.monotonic() - began, 1)
        meta["kernelbench_seeded"] = len(seeded)
    evaluators = {name: Evaluator(s, "cuda", 0) for name, s in settings.items()}
    rows = []
    write_report(rows, meta)
    try:
        for cand in cands:
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
            row = {k: cand[k] for k in ("name", "task", "what", "honest", "path") if k in cand}
            row.update(runs)
            if cand.get("honest"):
                walls = {name: statistics.median(r["wall_s"] for r in runs[name]) for name in runs}
                row["added_wall_fraction"] = round(walls["checked"] / walls["unchecked"] - 1, 4)
                row["speedup_rel_diff"] = speedup_rel_diff(runs)
            rows.append(row)
            write_report(rows, meta)
            print(f"{row['name']:36s} checked={runs['checked'][-1]['status']:13s} "
                  f"unchecked={runs['unchecked'][-1]['status']:13s} "
                  f"wall {runs['checked'][-1]['wall_s']:.2f}/{runs['unchecked'][-1]['wall_s']:.2f} s  "
                  f"speedup {runs['checked'][-1]['speedup']}/{runs['unchecked'][-1]['speedup']}  "
                  f"{runs['checked'][-1]['reason'][:110]}", file=sys.stderr, flush=True)
    finally:
        for ev in evaluators.values():
            ev.close()
    print(json.dumps(write_report(rows, meta), indent=1))


def speedup_rel_diff(runs: dict[str, list[dict]]) -> float | None:
    """|checked - unchecked| / unchecked of the median speedups, where both evaluators measured one."""
    medians = {}
    for name in EVALUATORS:
        speedups = [r["speedup"] for r in runs[name] if r["speedup"]]
        if not speedups:
            return None
        medians[name] = statistics.median(speedups)
    return round(abs(medians["checked"] - medians["unchecked"]) / medians["unchecked"], 4)


def group_summary(rows: list[dict]) -> dict:
    """Checked against unchecked over honest rows: summed median wall times, the fraction the checks
    add, the relative speedup differences, and the candidates not correct when checked."""
    wall = {name: round(sum(statistics.median(x["wall_s"] for x in r[name]) for r in rows), 3) for name in EVALUATORS}
    diffs = [r["speedup_rel_diff"] for r in rows if r.get("speedup_rel_diff") is not None]
    return {"candidates": len(rows), "wall_s": wall,
            "added_wall_fraction": round(wall["checked"] / wall["unchecked"] - 1, 4) if wall["unchecked"] else None,
            "speedup_rel_diff_median": round(statistics.median(diffs), 4) if diffs else None,
            "speedup_rel_diff_max": max(diffs) if diffs else None, "speedups_compared": len(diffs),
            "checked_not_correct": [r["name"] for r in rows if any(x["status"] != "correct" for x in r["checked"])]}


def write_report(rows: list[dict], meta: dict) -> dict:
    """The summary over the rows so far (with ``meta``: the KernelBench problems not seeded), and the
    JSON under $OUT rewritten with them: a call cut off by the device's time limit keeps every
    candidate it finished."""
    honest = [r for r in rows if r.get("honest")]
    summary = {}
    if honest:
        overall = group_summary(honest)
        summary = {"honest_wall_s": overall["wall_s"], "added_wall_fraction": overall["added_wall_fraction"],
                   "honest_lost": overall["checked_not_correct"],
                   "groups": {group: group_summary(mine) for group, prefix in GROUPS.items()
                              if (mine := [r for r in honest if r["name"].startswith(prefix)])}}
    summary.update(meta)
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "integrity_gpu.json").write_text(json.dumps({"summary": summary, "candidates": rows}, indent=1))
    return summary


if __name__ == "__main__":
    main()

"""A search killed with SIGKILL at chosen points of its progress resumes and loses nothing.

Each start of the run kills itself (``tests/kill_point.py``) at a point defined by what it has
done: inside or right after a transaction of the archive, as it opens the archive, or while the
sandbox worker evaluates a candidate.  Where it dies never depends on the clock, so the test
passes or fails the same on a fast machine and on a loaded one.
"""
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUDGET = 12
# The points where each start dies, in order.  None of them lets a start finish the budget: the
# sessions together commit at most 8 evaluations (seeds included) of the 14 a whole run makes.
KILL_POINTS = [
    "open:archive:1",  # run.json written, no archive yet
    "inside:add_program:2",  # the second seed's transaction never commits
    "after:record_evaluation:1",
    "evaluating:sandbox:2",  # the worker is evaluating a candidate for an engine that is gone
    "inside:record_evaluation:2",  # an evaluation is lost: its program is evaluated again
    "after:set_meta:1",  # while starting up
    "inside:record_evaluation:3",
    "after:record_evaluation:4",
]


def snapshot(run_dir: Path) -> dict | None:
    db = run_dir / "archive.db"
    if not db.exists():
        return None
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as c:
        tables = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
        if "evaluations" not in tables:
            return None
        return {
            "programs": {r[0] for r in c.execute("select id from programs")},
            "evaluations": c.execute("select count(*) from evaluations").fetchone()[0],
            "seeds": c.execute("select count(*) from programs where operator='seed'").fetchone()[0],
            "twice": c.execute("select program_id from evaluations group by program_id "
                               "having count(*) > 1").fetchall(),
            "children_done": c.execute("select count(*) from evaluations e join programs p "
                                       "on p.id = e.program_id where p.operator != 'seed'").fetchone()[0],
            "pending": c.execute("select count(*) from programs where id not in "
                                 "(select program_id from evaluations)").fetchone()[0],
        }


EMPTY = {"programs": set(), "evaluations": 0, "seeds": 0, "twice": [], "children_done": 0, "pending": 0}


def sandbox_workers(under: Path) -> list[int]:
    """Live sandbox workers of this test's runs (their scratch dirs are under ``under``)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if b"evaluator.worker" in (proc / "cmdline").read_bytes() and \
                    str(under) in os.readlink(proc / "cwd"):
                found.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


def committed_in_session(point: str, before: dict, after: dict) -> None:
    """What the session must have committed, given where it died."""
    when, what, n = point.split(":")
    n = int(n)
    new_programs = len(after["programs"] - before["programs"])
    new_evaluations = after["evaluations"] - before["evaluations"]
    if what == "record_evaluation":
        assert new_evaluations == (n - 1 if when == "inside" else n), (point, before, after)
    if what == "add_program":
        assert new_programs == (n - 1 if when == "inside" else n), (point, before, after)
    if point == "evaluating:sandbox:2":
        assert new_evaluations <= 1, (point, before, after)
    if what == "set_meta":
        assert new_programs == 0 and new_evaluations == 0, (point, before, after)


@pytest.mark.slow
def test_sigkill_at_chosen_points_then_resume(tmp_path):
    run_dir, scratch = tmp_path / "run", tmp_path / "scratch"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))  # the sandbox workers' scratch dirs, to find them
    overrides = [f"run.dir={run_dir}", "task=quick", "run.backend=local", "evaluator.device=cpu",
                 "run.progress=false", f"run.budget.evaluations={BUDGET}"]
    previous = EMPTY
    for point in KILL_POINTS:
        out = subprocess.run([sys.executable, "-m", "tests.kill_point", point, *overrides], env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == -9, f"{point}: exit {out.returncode}, not killed there\n{out.stderr[-3000:]}"
        if point.startswith("open:"):
            assert (run_dir / "run.json").exists() and not (run_dir / "archive.db").exists()
        state = snapshot(run_dir) or EMPTY
        assert previous["programs"] <= state["programs"], f"{point}: a program was lost"
        assert state["evaluations"] >= previous["evaluations"]
        assert state["seeds"] <= 2, f"{point}: seeds were added again"
        assert state["twice"] == [], f"{point}: a program was evaluated twice"
        committed_in_session(point, previous, state)
        previous = state
    assert previous["children_done"] < BUDGET and previous["pending"] > 0
    # A worker whose engine died finishes the candidate it holds, reads end-of-file and exits.
    # This waits for that (a deadline only for a worker that would never go).
    deadline = time.monotonic() + 300
    while sandbox_workers(scratch) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sandbox_workers(scratch) == [], "sandbox workers outlived their engine"
    final = subprocess.run([sys.executable, "-m", "evo.cli", "run", *overrides], env=env,
                           capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-2000:]
    state = snapshot(run_dir)
    assert previous["programs"] <= state["programs"]
    assert state["children_done"] == BUDGET and state["pending"] == 0
    assert state["seeds"] == 2 and state["twice"] == []
    assert sandbox_workers(scratch) == []  # the run that finished closed its worker

"""A search killed with SIGKILL at random moments resumes and loses nothing."""
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUDGET = 12


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


def orphans() -> list[int]:
    """Sandbox workers whose engine died and that were not cleaned up."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if b"evaluator.worker" in (proc / "cmdline").read_bytes():
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == 1:
                    found.append(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume(tmp_path):
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "evo.cli", "run", f"run.dir={run_dir}", "task=quick", "run.backend=local",
               "evaluator.device=cpu", "run.progress=false", f"run.budget.evaluations={BUDGET}"]
    rng = random.Random(1234)
    previous = {"programs": set(), "evaluations": 0}
    kills = 0
    for _ in range(8):
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(rng.uniform(1.0, 9.0))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        state = snapshot(run_dir)
        if state is None:
            continue
        assert previous["programs"] <= state["programs"], "a program was lost"
        assert state["evaluations"] >= previous["evaluations"]
        assert state["seeds"] <= 2, "seeds were added again"
        assert state["twice"] == [], "a program was evaluated twice"
        previous = state
    assert kills >= 4
    time.sleep(1.0)
    assert orphans() == []
    final = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-2000:]
    state = snapshot(run_dir)
    assert previous["programs"] <= state["programs"]
    assert state["children_done"] == BUDGET and state["pending"] == 0
    assert state["seeds"] == 2 and state["twice"] == []

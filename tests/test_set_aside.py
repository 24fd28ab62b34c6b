"""One task never sinks a run: broken, hanging and seedless tasks are set aside, with their reasons,
and the others are searched; a run left with nothing to search exits non-zero."""
import json
import shutil
import sqlite3

import pytest

from evo.views.fast_p import fast_p_rows
from evo.core.task import SUITE_DIR
from tests.test_cli import LOCAL, evo

BROKEN = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        raise RuntimeError("this reference is broken")


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''
HANGS = BROKEN.replace('raise RuntimeError("this reference is broken")', "while True:\n            pass")
SEEDLESS = BROKEN.replace('raise RuntimeError("this reference is broken")', "return x * 3.0")


@pytest.fixture
def folder(tmp_path):
    """gelu (searchable), a broken reference, a hanging one, one without a seed, one whose seed is wrong."""
    tasks = tmp_path / "level9"
    (tasks / "seeds").mkdir(parents=True)
    shutil.copy(SUITE_DIR / "gelu.py", tasks / "gelu.py")
    shutil.copy(SUITE_DIR / "seeds" / "gelu.py", tasks / "seeds" / "gelu.py")
    shutil.copy(SUITE_DIR / "gelu.py", tasks / "wrong_seed.py")
    (tasks / "seeds" / "wrong_seed.py").write_text(
        (SUITE_DIR / "seeds" / "gelu.py").read_text().replace("0.5 * x", "0.25 * x"))
    (tasks / "broken.py").write_text(BROKEN)
    (tasks / "hangs.py").write_text(HANGS)
    (tasks / "seedless.py").write_text(SEEDLESS)
    return tasks


def set_aside_rows(run_dir) -> dict:
    with sqlite3.connect(run_dir / "archive.db") as c:
        return {task: (stage, reason) for task, stage, reason in c.execute("select task, stage, reason from set_aside")}


@pytest.mark.slow
def test_broken_hanging_and_seedless_tasks_are_set_aside_and_the_rest_is_searched(tmp_path, folder):
    run_dir = tmp_path / "run"
    args = [f"run.dir={run_dir}", f"task.path={folder}", "run.budget.evaluations=2", "evaluator.timeout_s=20",
            *LOCAL]
    out = evo("run", *args, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    aside = set_aside_rows(run_dir)
    assert set(aside) == {"broken", "hangs", "seedless", "wrong_seed"}
    assert aside["broken"][0] == "reference" and "this reference is broken" in aside["broken"][1]
    assert aside["hangs"][0] == "timeout" and "did not finish within" in aside["hangs"][1]
    assert aside["seedless"][0] == "seed" and "llm.model" in aside["seedless"][1]
    assert aside["wrong_seed"][0] == "seed_evaluation" and "incorrect" in aside["wrong_seed"][1]
    for task in aside:  # one clear line each
        assert f"task {task} set aside" in out.stdout.replace("\n", " ")
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert {e["task"] for e in events if e["event"] == "task_set_aside"} == set(aside)

    status = evo("status", f"run.dir={run_dir}")
    assert status.returncode == 0, status.stderr
    flat = " ".join(status.stdout.split())
    assert "task broken set aside (reference): the reference failed: RuntimeError: this reference is broken" in flat
    assert "fast_1.5" in flat and "level9" in flat and "strict tolerances" in flat

    page = evo("report", f"run.dir={run_dir}", f"out={tmp_path / 'report'}")
    assert page.returncode == 0, page.stderr
    html = (tmp_path / "report" / "report.html").read_text()
    assert "Tasks set aside" in html and "this reference is broken" in html and "fast_2" in html

    # A resume keeps them aside without running their references again; a fixed file is tried again.
    (folder / "seeds" / "seedless.py").write_text(
        (SUITE_DIR / "seeds" / "gelu.py").read_text())  # a seed at last, though a wrong one
    again = evo("run", *args, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    flat = " ".join(again.stdout.split())
    assert "task broken stays set aside (its files unchanged)" in flat
    assert "task hangs stays set aside" in flat and "task seedless stays" not in flat
    assert set_aside_rows(run_dir)["seedless"][0] == "seed_evaluation"  # tried again, its seed evaluated


@pytest.mark.slow
def test_a_run_with_nothing_to_search_exits_non_zero_and_says_why(tmp_path, folder):
    for name in ("gelu.py", "wrong_seed.py", "hangs.py"):
        (folder / name).unlink()
    run_dir = tmp_path / "run"
    out = evo("run", f"run.dir={run_dir}", f"task.path={folder}", *LOCAL)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "nothing to search: every task was set aside" in out.stderr
    assert "this reference is broken" in out.stderr and "has no seed kernel" in out.stderr
    assert not run_dir.exists()  # nothing was written


@pytest.mark.slow
def test_a_run_whose_every_seed_fails_exits_non_zero(tmp_path, folder):
    for name in ("gelu.py", "broken.py", "hangs.py", "seedless.py"):
        (folder / name).unlink()
    run_dir = tmp_path / "run"
    out = evo("run", f"run.dir={run_dir}", f"task.path={folder}", "run.budget.evaluations=2", *LOCAL)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "every task was set aside" in out.stderr
    assert set_aside_rows(run_dir)["wrong_seed"][0] == "seed_evaluation"


def test_fast_p_and_geometric_means_per_group():
    bests = [dict(task="a", group="level1", set_aside=False, speedup=2.5, speedup_vs_compiled=1.2),
             dict(task="b", group="level1", set_aside=False, speedup=1.2, speedup_vs_compiled=0.8),
             dict(task="c", group="level1", set_aside=False, speedup=0.5, speedup_vs_compiled=None),
             dict(task="d", group="level1", set_aside=True, speedup=None, speedup_vs_compiled=None),
             dict(task="e", group="level2", set_aside=False, speedup=1.6, speedup_vs_compiled=1.0)]
    rows = {r["group"]: r for r in fast_p_rows(bests)}
    one = rows["level1"]
    assert one["tasks"] == 4 and one["set_aside"] == 1
    assert one["fast_p"] == {0.0: 0.75, 1.0: 0.5, 1.5: 0.25, 2.0: 0.25}
    assert one["geomean"] == pytest.approx((2.5 * 1.2 * 0.5) ** (1 / 3)) and one["geomean_n"] == 3
    assert one["geomean_compiled"] == pytest.approx((1.2 * 0.8) ** 0.5) and one["geomean_compiled_n"] == 2
    assert rows["all"]["tasks"] == 5 and rows["all"]["fast_p"][1.5] == pytest.approx(2 / 5)

"""The `evo` command as users call it: a subprocess per invocation."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evo.core.task import SUITE_DIR

LOCAL = ["run.backend=local", "evaluator.device=cpu", "run.progress=false"]
QUICK = ["task=quick", *LOCAL]


def evo(*args, timeout=300, cwd=None):
    return subprocess.run([sys.executable, "-m", "evo.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


@pytest.mark.slow
def test_eval_prints_one_json_object_last():
    out = evo("eval", f"task={SUITE_DIR / 'gelu.py'}", f"candidate={SUITE_DIR / 'seeds' / 'gelu.py'}",
              "evaluator.device=cpu")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == "correct" and result["speedup"] > 0
    assert {"status", "speedup", "runtime_ms", "ref_runtime_ms", "reason"} <= set(result)


@pytest.mark.slow
def test_eval_reports_a_broken_candidate(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text((SUITE_DIR / "seeds" / "gelu.py").read_text().replace("tl.math.erf", "tl.math.nope"))
    out = evo("eval", f"task={SUITE_DIR / 'gelu.py'}", f"candidate={bad}", "evaluator.device=cpu")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and result["status"] in ("compile_error", "runtime_error")
    assert result["speedup"] is None and result["reason"]


@pytest.mark.slow
def test_run_then_continue_then_status(tmp_path):
    run_dir = tmp_path / "run"
    first = evo("run", f"run.dir={run_dir}", "run.budget.evaluations=2", *QUICK, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # nothing written outside run.dir
    assert "starting run" in first.stdout and "gelu" in first.stdout and "row_sum" in first.stdout
    assert {"archive.db", "config.yaml", "run.json", "events.jsonl"} <= {p.name for p in run_dir.iterdir()}
    second = evo("run", f"run.dir={run_dir}", "run.budget.evaluations=4", *QUICK)
    assert second.returncode == 0, second.stderr
    assert "resuming run" in second.stdout
    status = evo("status", f"run.dir={run_dir}")
    assert status.returncode == 0 and "children evaluated: 4; resumes: 1" in status.stdout
    from archive import Archive
    archive = Archive(f"sqlite:///{run_dir / 'archive.db'}")
    assert "budget" in archive.get_meta("config") and archive.get_meta("code_version.1").startswith("0.1.0")
    archive.close()


@pytest.mark.slow
def test_multirun_sweep_gives_each_job_its_own_run_dir(tmp_path):
    out = evo("run", "-m", "run.budget.evaluations=1", "islands.count=1,2", *QUICK, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (sweep,) = (tmp_path / "multirun").iterdir()
    runs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in runs] == ["0", "1"]
    for run in runs:
        assert f"dir: {run}" in (run / "config.yaml").read_text()
        status = evo("status", f"run.dir={run}")
        assert status.returncode == 0 and "children evaluated: 1" in status.stdout
    summary = (sweep / "summary.md").read_text()
    assert "| 0 | run.budget.evaluations=1 islands.count=1" in summary and "gelu best" in summary
    jobs = json.loads((sweep / "summary.json").read_text())
    assert [j["overrides"][1] for j in jobs] == ["islands.count=1", "islands.count=2"]
    assert all(row["best_speedup"] for j in jobs for row in j["tasks"])


BROKEN_REFERENCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("this reference is broken")

def get_inputs():
    return [torch.randn(8)]

def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_a_run_dir_in_use_is_refused(tmp_path):
    import fcntl
    run_dir = tmp_path / "run"
    assert evo("run", f"run.dir={run_dir}", "run.budget.evaluations=0", *QUICK).returncode == 0
    with open(run_dir / ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running engine holds it
        out = evo("run", f"run.dir={run_dir}", "run.budget.evaluations=1", *QUICK)
    assert out.returncode != 0 and "in use by another evo run" in out.stderr


@pytest.mark.parametrize("case", ["missing", "malformed", "raises", "unknown_key", "llm", "unwritable",
                                  "other_tasks", "no_seed"])
@pytest.mark.slow
def test_bad_input_gets_one_clear_message_and_no_run_state(tmp_path, case):
    run_dir = tmp_path / "run"
    args = [f"run.dir={run_dir}", *LOCAL]
    expect = {
        "missing": ("task path not found", [f"task.path={tmp_path / 'nope.py'}"]),
        "malformed": ("not valid Python", [f"task.path={tmp_path / 'bad.py'}"]),
        "raises": ("this reference is broken", [f"task.path={tmp_path / 'broken.py'}"]),
        "unknown_key": ("nosuchkey", ["task=quick", "nosuchkey=1"]),
        "llm": ("not usable", ["task=quick", "llm.model=openai/x", "llm.api_base=http://127.0.0.1:9/v1",
                               "llm.retries=0"]),
        "unwritable": ("cannot be created", ["task=quick", f"run.dir={tmp_path / 'afile' / 'run'}"]),
        "no_seed": ("has no seed kernel", [f"task.path={tmp_path / 'noseed.py'}"]),
        "other_tasks": ("holds a run of tasks", ["task=default"]),
    }[case]
    (tmp_path / "bad.py").write_text("def broken(:\n")
    (tmp_path / "broken.py").write_text(BROKEN_REFERENCE)
    (tmp_path / "afile").write_text("a file, not a directory")
    (tmp_path / "noseed.py").write_text(BROKEN_REFERENCE.replace('raise RuntimeError("this reference is broken")',
                                                                 "return x * 2"))
    if case == "other_tasks":
        run_dir.mkdir()
        (run_dir / "run.json").write_text(json.dumps({"tasks": ["gelu"]}))
    out = evo("run", *args, *expect[1])
    assert out.returncode != 0
    assert expect[0] in out.stderr + out.stdout
    assert "Traceback" not in out.stderr
    if case != "other_tasks":
        assert not run_dir.exists()
    else:
        assert sorted(p.name for p in run_dir.iterdir()) == ["run.json"]


def test_help_and_unknown_command():
    assert evo("--help").returncode == 0
    out = evo("frobnicate")
    assert out.returncode == 2 and "unknown command" in out.stderr


def test_status_of_a_missing_run(tmp_path):
    out = evo("status", f"run.dir={tmp_path}")
    assert out.returncode == 2 and "holds no evo run" in out.stderr


def test_eval_needs_both_files(tmp_path):
    out = evo("eval", f"task={SUITE_DIR / 'gelu.py'}")
    assert out.returncode == 2 and "usage" in out.stderr
    out = evo("eval", f"task={SUITE_DIR / 'gelu.py'}", f"candidate={tmp_path / 'none.py'}")
    assert out.returncode == 2 and "candidate file not found" in out.stderr
    assert Path(SUITE_DIR / "gelu.py").exists()

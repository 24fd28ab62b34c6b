"""Ctrl-C on `evo run`: the run stops at once, its evaluations under way ended with their workers
(not awaited), what it committed kept, and it says how to go on."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.candidates import GOOD, TASK


@pytest.mark.slow
@pytest.mark.parametrize("signals", [1, 2])  # 2: as `timeout -s INT` to the process group and Ray together
def test_an_interrupted_run_stops_at_once_and_says_how_to_go_on(tmp_path, signals):
    tasks = tmp_path / "tasks"
    (tasks / "seeds").mkdir(parents=True)
    (tasks / "double.py").write_text(TASK)
    # The seed's first call sleeps for a minute: an evaluation the interrupt must not wait for.
    (tasks / "seeds" / "double.py").write_text(GOOD.replace("PREPARE", "__import__('time').sleep(60)"))
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "evo.cli", "run", f"run.dir={run_dir}", f"task.path={tasks}",
                             "run.backend=local", "evaluator.device=cpu", "run.progress=false",
                             "evaluator.timeout_s=300", "run.budget.evaluations=4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        events = run_dir / "events.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (events.exists() and '"event": "start"' in events.read_text()):
            time.sleep(0.2)
        assert events.exists(), proc.communicate(timeout=30)
        time.sleep(3)  # the seed's evaluation is under way, asleep in its sandbox
        stopped = time.monotonic()
        for _ in range(signals):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.01)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert took < 20, took  # not the minute the evaluation would have taken
    assert "interrupted; every committed change is kept" in err and f"run.dir={run_dir}" in err
    kinds = [json.loads(line)["event"] for line in events.read_text().splitlines()]
    assert "interrupted" in kinds
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs_in(pid, str(tmp_path))]


def _runs_in(pid: str, where: str) -> bool:
    """A process left behind whose command line names this test's directory (a sandbox worker's scratch)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return where.encode() in f.read()
    except OSError:
        return False

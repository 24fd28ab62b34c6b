"""A Ray cluster of two nodes on 127.0.0.1 (`ray start` head plus worker): a search
joins it with ``ray.address`` and spreads its islands and evaluators over both."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_cluster(temp_dir: str) -> None:
    """Kill only this cluster's processes (`ray stop` would stop every Ray on the machine)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if temp_dir.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            pass
    children = []
    for pid in pids:
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
        children += [int(p) for p in out.stdout.split()]
    for pid in pids + children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def two_node_cluster():
    temp_dir = tempfile.mkdtemp(prefix="evo-ray-", dir="/tmp")  # Ray's socket paths must stay short
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    port = _free_port()
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=2", "--num-gpus=0", "--disable-usage-stats"]
    try:
        for args in (["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp_dir}"],
                     [f"--address=127.0.0.1:{port}"]):
            out = subprocess.run([RAY, "start", *args, *common], capture_output=True, text=True, env=env,
                                 timeout=180)
            if out.returncode != 0:
                pytest.fail(f"ray start {' '.join(args)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        yield f"127.0.0.1:{port}", env
    finally:
        _kill_cluster(temp_dir)


@pytest.mark.slow
def test_a_search_spreads_over_two_ray_nodes(two_node_cluster, tmp_path):
    address, env = two_node_cluster
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "evo.cli", "run", f"run.dir={run_dir}", "task=quick", f"ray.address={address}",
         "evaluator.device=cpu", "evaluator.workers=2", "islands.count=2", "run.budget.evaluations=4",
         "run.progress=false"], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "Ray: 2 nodes; islands on 2, evaluators on 2" in out.stdout, out.stdout
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    (placement,) = [e for e in events if e["event"] == "placement"]
    assert len(set(placement["islands"])) == 2 and len(set(placement["evaluators"])) == 2
    db = create_engine(f"sqlite:///{run_dir / 'archive.db'}")
    with db.connect() as c:
        children = c.execute(text(
            "select count(*) from evaluations e join programs p on p.id = e.program_id "
            "where p.operator != 'seed'")).scalar()
    assert children == 4


@pytest.mark.slow
def test_killing_an_island_actor_mid_run_loses_nothing(tmp_path, builtin_tasks):
    import ray

    from archive import Archive
    from evaluator import EvaluatorSettings
    from evo.controller import Controller
    from evo.run_settings import RunSettings
    from evo.progress import RunEvents
    from islands import Island, MigrationSettings
    from islands.ray_backend import RayBackend, RaySettings
    from operators import TunableConstantMutation

    budget, killed = 8, []
    islands = [Island(i, [TunableConstantMutation()], [1.0], seed=3) for i in range(2)]
    backend = RayBackend(RaySettings(num_cpus=2), islands, EvaluatorSettings(device="cpu", timeout_s=60), "cpu", 1)

    class KillIslandZero(RunEvents):
        def __call__(self, kind, **fields):
            super().__call__(kind, **fields)
            if kind == "evaluated" and fields["children_done"] == 2 and not killed:
                ray.kill(backend.islands[0], no_restart=False)  # as if its process or node died
                killed.append(True)

    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    events = KillIslandZero(tmp_path, budget, show=False)
    controller = Controller(settings=RunSettings(dir=str(tmp_path), seed=3, budget_evaluations=budget),
                            tasks=[builtin_tasks["gelu"]], archive=archive, backend=backend,
                            migration=MigrationSettings(interval=0), events=events)
    try:
        controller.run()
    finally:
        backend.close()
        events.close()
    assert killed and archive.child_evaluation_count() == budget and archive.pending() == []
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    after = lines[next(i for i, e in enumerate(lines) if e.get("children_done") == 2):]
    # The restarted island 0 goes on proposing children that get evaluated.
    assert any(e["event"] == "evaluated" and e["island"] == 0 for e in after[1:])

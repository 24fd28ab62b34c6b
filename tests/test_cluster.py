"""A Ray cluster of two nodes of one CPU on 127.0.0.1 (`ray start` head plus worker), with token
authentication on as docs/clusters.md's recipe starts it: a search joins it with ``ray.address`` and
spreads its islands and evaluators over both; a run that cannot join says why in one line; an actor
the cluster cannot place is reported, then given up; a plain run beside it starts its own Ray."""
from __future__ import annotations

import json
import os
import re
import secrets
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
    # One token for every node and for the driver, as docs/clusters.md's recipe sets it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    port = _free_port()
    # One CPU per node: islands must leave each node's CPU whole for an evaluator.
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0", "--disable-usage-stats"]
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


def evo_run(*args: str, env: dict, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *(prefix or ("-m", "evo.cli")), "run", *args, "task=quick",
                           "evaluator.device=cpu", "run.progress=false"],
                          capture_output=True, text=True, timeout=600, env=env)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    (line,) = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    return line


@pytest.mark.slow
@pytest.mark.parametrize("auth", [{"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-token"},
                                  {"RAY_AUTH_MODE": "disabled"}])
def test_a_run_without_the_clusters_token_says_why_in_one_line(two_node_cluster, tmp_path, auth):
    address, env = two_node_cluster
    env = {k: v for k, v in env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")} | auth
    out = evo_run(f"run.dir={tmp_path / 'run'}", f"ray.address={address}", env=env)
    line = one_error_line(out)
    assert f"cannot join the Ray cluster at {address}" in line and "RAY_AUTH_MODE=token" in line
    assert "InvalidAuthToken" not in out.stderr  # not Ray's warning a second while it retried
    assert ("refused this process's token" if auth["RAY_AUTH_MODE"] == "token" else "authentication off") in line
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_run_that_finds_nothing_at_the_address_says_so_at_once(tmp_path):
    with socket.socket() as held:  # bound, never listening, for the whole test: nothing else can take it
        held.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{held.getsockname()[1]}"
        line = one_error_line(evo_run(f"run.dir={tmp_path / 'run'}", f"ray.address={address}", env=dict(os.environ)))
    assert f"cannot join the Ray cluster at {address}: nothing answers at {address}" in line


MISMATCHED = ("-c", "import sys, ray._private.utils as u; u.compute_version_info = lambda: ('2.0.0', '3.9.1'); "
                    "from evo.cli import main; sys.exit(main())")


@pytest.mark.slow
def test_a_driver_of_another_ray_version_says_so_in_one_line(two_node_cluster, tmp_path):
    address, env = two_node_cluster
    # This process claims another Ray and Python than the cluster's, as a driver of another install would.
    line = one_error_line(evo_run(f"run.dir={tmp_path / 'run'}", f"ray.address={address}", env=env,
                                  prefix=MISMATCHED))
    assert "version mismatch: the cluster runs Ray " in line and "this process Ray 2.0.0 on Python 3.9.1" in line


@pytest.mark.slow
def test_an_actor_the_cluster_cannot_place_is_reported_then_given_up(two_node_cluster, tmp_path):
    address, env = two_node_cluster
    # Three evaluators of one CPU each on two one-CPU nodes: one can never start.
    out = evo_run(f"run.dir={tmp_path / 'run'}", f"ray.address={address}", "evaluator.workers=3",
                  "ray.placement_report_s=2", "ray.placement_timeout_s=15", env=env)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert re.search(r"Ray: after \d+ s, \d actor\(s\) of this run have not started", out.stderr)
    assert re.search(r"evaluator \d waits for CPU 1: no node has that much free now", out.stderr), out.stderr
    assert re.search(r"node \w+: free/total CPU 0/1", out.stderr), out.stderr
    assert re.search(r"error: Ray could not start evaluator \d in \d+ s \(ray.placement_timeout_s\)", out.stderr)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_plain_run_beside_a_running_cluster_starts_its_own_ray_and_says_so(two_node_cluster, tmp_path):
    address, env = two_node_cluster
    run_dir = tmp_path / "run"
    out = evo_run(f"run.dir={run_dir}", "run.budget.evaluations=1", env=dict(env, RAY_ADDRESS=address))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"starts its own local Ray; the Ray cluster at {address}" in out.stderr + out.stdout
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    (placement,) = [e for e in events if e["event"] == "placement"]
    assert placement["nodes"] == 1  # its own Ray, not the two-node cluster


@pytest.mark.slow
def test_killing_an_island_actor_mid_run_loses_nothing(tmp_path, builtin_tasks):
    import ray

    from archive import Archive
    from evaluator import EvaluatorSettings
    from evo.loop.controller import Controller
    from evo.loop.run_settings import RunSettings
    from evo.views.progress import RunEvents
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

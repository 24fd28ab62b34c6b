"""Containment of candidate code (evaluator/containment.py, evaluator/worker.py), on the CPU.

Each hostile candidate does its deed when its module loads, writes what it managed into a
report in its scratch directory (the one place it may write), and then computes honestly: so
the evaluation is ``correct`` and the report says what the containment let through.
"""
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evaluator.containment import describe, descendants, probe
from tests.support.candidates import TASK, candidate
from tests.support.hostile import DETACH, READ_ENVIRONS, REPO, SECRET, WRITE_FILES, marked

TIMEOUT_S = 120  # an evaluation that waited for a detached process would take this long


@pytest.fixture(scope="module", params=[("cpu", "auto"), ("cpu", "landlock"),
                                        pytest.param(("cuda", "auto"), marks=pytest.mark.gpu),
                                        pytest.param(("cuda", "landlock"), marks=pytest.mark.gpu)],
                ids=lambda p: "-".join(p))
def contained(request):
    """An evaluator whose candidates are contained in the given mode, with what this machine allows."""
    device, mode = request.param
    state = probe(mode=mode, cuda=device == "cuda")
    settings = EvaluatorSettings(device=device, timeout_s=TIMEOUT_S, containment=mode, compile_baseline=False)
    evaluator = Evaluator(settings, device, 0 if device == "cuda" else None)
    yield evaluator, state
    evaluator.close()


def _evaluated_on(evaluator, name: str):
    """The worker whose scratch holds the report ``name``: with a pipeline (on a GPU) any of them."""
    holding = [w for w in evaluator.workers if (w.scratch / name).exists()]
    assert holding, f"no worker's scratch holds {name}"
    return max(holding, key=lambda w: (w.scratch / name).stat().st_mtime)


def _report(evaluator, name: str):
    return json.loads((_evaluated_on(evaluator, name).scratch / name).read_text())


@pytest.mark.slow
def test_a_candidate_cannot_read_the_environment_of_other_processes(contained):
    evaluator, state = contained
    # A process of this machine whose environment was made with the key (as the engine's is).
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                              env=dict(os.environ, OPENAI_API_KEY=SECRET))
    try:
        source = READ_ENVIRONS.replace("SECRET", SECRET).replace("ENGINE", str(holder.pid)) + candidate()
        result = evaluator.evaluate("double", TASK, source)
    finally:
        holder.kill()
        holder.wait()
    assert result.status is Status.CORRECT, result.reason
    report = _report(evaluator, "report-environ.json")
    line = describe(state)
    if state["processes"] == "visible":  # this machine allows neither namespaces nor Landlock: said so
        assert line.startswith("containment none: processes visible") and "off because" in line
        pytest.skip(f"this machine allows no protection of other processes: {line}")
    assert report["found"] == [], line
    assert result.extra["containment"]["processes"] == state["processes"]
    if state["processes"].startswith("hidden"):
        assert report["listed"] < 10 and not report["engine_listed"]  # its own namespace's processes only
    else:
        assert "listed, environments closed" in line


def test_a_candidate_cannot_signal_other_processes(contained):
    evaluator, state = contained
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        kill = f"""
_os = __import__("o" + "s")
try:
    getattr(_os, "ki" + "ll")({target.pid}, 9)
except OSError:
    pass
"""
        result = evaluator.evaluate("double", TASK, kill + candidate())
        alive = target.poll() is None
    finally:
        target.kill()
        target.wait()
    assert result.status is Status.CORRECT, result.reason
    if not (state["processes"].startswith("hidden") or "signals blocked" in state["processes"]):
        pytest.skip(f"this machine does not keep candidates from signalling processes: {describe(state)}")
    assert alive


def test_a_candidate_can_write_only_into_its_scratch(contained, tmp_path):
    evaluator, state = contained
    name = f"escaped-{uuid.uuid4().hex[:8]}"
    # Once each: started from the repository, the current directory is the repository.
    targets = list(dict.fromkeys([os.getcwd(), str(REPO), os.path.expanduser("~"), str(tmp_path), "/tmp"]))
    source = WRITE_FILES.replace("TARGETS", repr(targets)).replace("NAME", name) + candidate()
    result = evaluator.evaluate("double", TASK, source)
    escaped = [Path(t, name) for t in targets if Path(t, name).exists()]
    for path in escaped:  # where nothing is contained, leave nothing behind
        path.unlink()
    assert result.status is Status.CORRECT, result.reason  # Triton still compiles into its cache
    if not state["filesystem"].startswith("read-only"):
        assert "filesystem writable" in describe(state) and state["why"].get("filesystem")
        pytest.skip(f"this machine allows no read-only filesystem for candidates: {describe(state)}")
    assert _report(evaluator, "report-write.json") == [str(_evaluated_on(evaluator, "report-write.json").scratch)]
    assert escaped == []


def test_every_process_a_candidate_starts_ends_with_its_evaluation(contained):
    evaluator, _ = contained
    marker = f"evo-escapee-{uuid.uuid4().hex[:12]}"
    started = time.monotonic()
    result = evaluator.evaluate("double", TASK, DETACH.replace("MARKER", marker) + candidate())
    took = time.monotonic() - started
    assert result.status is Status.CORRECT, result.reason
    assert took < TIMEOUT_S / 2, f"the evaluation waited {took:.0f} s for a detached process"
    assert marked(marker) == []
    assert all(descendants(w._proc.pid) == [] for w in evaluator.workers if w._proc)


def test_a_worker_stopped_mid_evaluation_leaves_no_detached_process(contained):
    import threading

    evaluator, _ = contained
    marker = f"evo-escapee-{uuid.uuid4().hex[:12]}"
    source = DETACH.replace("MARKER", marker) + "__import__('time').sleep(60)\n" + candidate()
    outcome = []  # the evaluation's result, or what it raised: a closed worker is a crash, not an error

    def evaluate() -> None:
        try:
            outcome.append(evaluator.evaluate("double", TASK, source))
        except Exception as exc:  # noqa: BLE001
            outcome.append(exc)

    evaluating = threading.Thread(target=evaluate)
    evaluating.start()
    deadline = time.monotonic() + 60
    while not marked(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marked(marker), "the candidate never started its sleeper"
    # The worker evaluating it: with a pipeline (on a GPU) not necessarily the first, and the one the
    # sleeper is below (a worker is a child subreaper).
    busy = [w for w in evaluator.workers if w._proc and set(marked(marker)) & set(descendants(w._proc.pid))]
    assert len(busy) == 1, f"{len(busy)} workers hold the sleeper"
    busy[0].close()  # as the engine does when a worker stops answering
    evaluating.join(timeout=30)
    assert not evaluating.is_alive(), "the evaluation waited on a closed worker"  # not until its deadline
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    assert outcome[0].status is Status.CRASHED, outcome[0].reason
    deadline = time.monotonic() + 5  # SIGKILL is delivered asynchronously, and through the chain
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked(marker) == []


@pytest.mark.slow
def test_an_honest_candidate_is_correct_and_its_containment_recorded(contained):
    evaluator, state = contained
    result = evaluator.evaluate("double", TASK, candidate())
    assert result.status is Status.CORRECT, result.reason
    recorded = result.extra["containment"]
    assert recorded["level"] == state["level"] and recorded["filesystem"] == state["filesystem"]


def test_containment_off_is_said_plainly():
    state = probe(mode="off")
    assert state["level"] == "none"
    assert describe(state).startswith("containment none: processes visible, filesystem writable")
    assert "evaluator.containment=off" in describe(state)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.slow
def test_evo_eval_keeps_the_engines_key_and_answers_despite_a_detached_sleeper(tmp_path, device):
    """``evo eval`` started with an API key in its environment, as a user would start it."""
    marker = f"evo-escapee-{uuid.uuid4().hex[:12]}"
    task, cand = tmp_path / "double.py", tmp_path / "cand.py"
    task.write_text(TASK)
    # If it finds the key anywhere, the candidate fails loudly, with the key in its reason.
    leak = READ_ENVIRONS.replace("SECRET", SECRET).replace("ENGINE", "0")
    leak += '\nif _found:\n    raise RuntimeError("found the key in " + repr(_found))\n'
    cand.write_text(leak + DETACH.replace("MARKER", marker) + candidate())
    env = dict(os.environ, OPENAI_API_KEY=SECRET,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "evo.cli", "eval", f"task={task}", f"candidate={cand}",
                          f"evaluator.device={device}", f"evaluator.timeout_s={TIMEOUT_S}",
                          "evaluator.compile_baseline=false"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=4 * TIMEOUT_S)
    took = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    line = next(l for l in out.stderr.splitlines() if l.startswith("containment "))
    assert result["status"] == "correct", (result["reason"], line)
    assert took < TIMEOUT_S, f"evo eval took {took:.0f} s: it waited for a detached process"
    assert marked(marker) == []
    assert line.split(":")[0].split()[1] == result["extra"]["containment"]["level"]


@pytest.mark.slow
def test_a_run_records_its_containment_and_status_shows_it(small_run, capsys):
    from evo.cli import main

    recorded = json.loads((small_run / "run.json").read_text())["containment"]
    assert recorded["level"] in ("full", "partial", "none")
    assert main(["status", f"run.dir={small_run}"]) == 0
    assert describe(recorded) in capsys.readouterr().out


def test_namespaces_that_fail_outright_are_said_and_left_out(monkeypatch, tmp_path):
    """As where a user namespace is made but its uid map refused (some AppArmor policies)."""
    from evaluator import containment

    def refused(network):
        raise RuntimeError("a user namespace was made but its uid map refused")

    monkeypatch.setattr(containment, "_enter_namespaces", refused)
    state = containment.settle([str(tmp_path)], mode="auto")
    assert "uid map refused" in state["namespaces_off"]
    assert "off because: namespaces: RuntimeError: a user namespace was made" in describe(state)
    assert state["processes"] != "hidden (PID namespace)" and state["level"] != "full"


def test_read_only_mounts_before_linux_5_12(monkeypatch, tmp_path):
    """Without mount_setattr (Linux < 5.12), each mount is remounted read-only in turn."""
    import ctypes
    import errno

    from evaluator import containment

    def missing(path, read_only):
        ctypes.set_errno(errno.ENOSYS)
        raise containment._Failed("mount_setattr: Function not implemented")

    monkeypatch.setattr(containment, "_mount_setattr", missing)
    scratch, outside = tmp_path / "scratch", tmp_path / "outside"
    scratch.mkdir()
    outside.mkdir()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        wrote = []
        try:
            state = containment.enter([str(scratch)], mode="auto")
            for folder in (scratch, outside):
                try:
                    (folder / "file").write_text("x")
                    wrote.append(folder.name)
                except OSError:
                    pass
            os.write(write_fd, json.dumps([state["filesystem"], wrote]).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reply:
        filesystem, wrote = json.loads(reply.read() or b'["no reply", []]')
    os.waitpid(pid, 0)
    if filesystem != "read-only (mount namespace)":
        pytest.skip(f"this machine allows no mount namespace: {filesystem}")
    assert wrote == ["scratch"] and not (outside / "file").exists()


def test_landlock_that_stops_cuda_is_left_out_and_said(monkeypatch, tmp_path):
    """As root in a container, CUDA's driver wants to make device nodes that Landlock refuses (cuInit:
    error 304): candidates must run, so Landlock is left out and the line says why."""
    import evaluator.containment as containment

    if probe(mode="landlock")["filesystem"] != "read-only (Landlock)":
        pytest.skip("this machine has no Landlock")
    monkeypatch.setattr(containment, "cuda_failure", lambda: "cuInit returned CUDA error 304")
    state = containment.settle([str(tmp_path)], mode="landlock", cuda=True)
    assert state["landlock_off"].startswith("Landlock stops CUDA on this host (cuInit returned CUDA error 304)")
    assert state["filesystem"] == "writable" and state["why"]["filesystem"] == state["landlock_off"]
    assert "Landlock stops CUDA" in describe(state)
    assert containment.settle([str(tmp_path)], mode="landlock")["filesystem"] == "read-only (Landlock)"  # CPU

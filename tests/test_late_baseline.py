"""A search's results do not wait for their task's torch.compile baseline (Evaluator.evaluate's
late_baseline): their archive rows get ``speedup_vs_compiled`` once it is measured (evo.loop.late_baselines)."""
import threading
import time

import pytest

from archive import Archive
from archive.queries import ArchiveReader
from evaluator import EvalResult, Evaluator, EvaluatorSettings, Status
from evo.loop.late_baselines import LateBaselines
from islands.backend import LocalBackend
from tests.support import StandInBackend
from tests.support.candidates import TASK

CORRECT = {"status": "correct", "speedup": 2.0, "runtime_ms": 1.0, "ref_runtime_ms": 2.0}


@pytest.fixture
def slow_baseline(monkeypatch):
    """An evaluator whose requests are stubs: evaluations answer at once, the baseline once released."""
    ev = Evaluator(EvaluatorSettings(device="cpu", compile_baseline=True), "cpu")
    release, asked = threading.Event(), []

    def request(kind, task_name, task_source, *, worker=None, **extra):
        asked.append(kind)
        if kind == "compile_baseline":
            assert release.wait(10)
            return {"ratio": 0.5}
        return dict(CORRECT)

    monkeypatch.setattr(ev, "_send", request)
    yield ev, release, asked
    release.set()
    ev.close()


def test_a_late_result_is_not_held_for_its_tasks_baseline(slow_baseline):
    ev, release, asked = slow_baseline
    first = ev.evaluate("double", TASK, "a", late_baseline=True)  # would wait forever for the baseline
    assert first.status is Status.CORRECT and first.extra["compile_baseline"] == "pending"
    assert first.compiled_runtime_ms is None and first.speedup_vs_compiled is None
    assert "baseline_compile_s" not in first.extra["phases"]
    deadline = time.monotonic() + 10
    while "compile_baseline" not in asked and time.monotonic() < deadline:  # on a thread of its own
        time.sleep(0.01)
    assert asked.count("compile_baseline") == 1  # asked once, with the first evaluation
    release.set()
    assert ev.settled_baselines(timeout_s=10) == {"double": {"ratio": 0.5}}
    later = ev.evaluate("double", TASK, "b", late_baseline=True)
    assert later.extra["compile_baseline_ratio"] == 0.5 and "compile_baseline" not in later.extra
    assert later.compiled_runtime_ms == pytest.approx(1.0) and later.speedup_vs_compiled == pytest.approx(1.0)
    assert asked.count("compile_baseline") == 1


def test_without_late_baseline_the_result_waits_for_it(slow_baseline):
    ev, release, _ = slow_baseline
    threading.Timer(0.3, release.set).start()
    result = ev.evaluate("double", TASK, "a")  # evo eval and the experiments: the figure in the result
    assert result.speedup_vs_compiled == pytest.approx(1.0) and "compile_baseline" not in result.extra
    assert result.extra["phases"]["baseline_compile_s"] >= 0.2


def test_settled_baselines_gives_up_after_its_timeout(slow_baseline):
    ev, release, _ = slow_baseline
    ev.evaluate("double", TASK, "a", late_baseline=True)
    assert ev.settled_baselines(timeout_s=0.2) == {}  # still measured: not awaited past the timeout
    release.set()
    assert ev.settled_baselines(timeout_s=10) == {"double": {"ratio": 0.5}}


def test_a_baseline_whose_request_raises_is_settled_as_an_error(monkeypatch):
    ev = Evaluator(EvaluatorSettings(device="cpu", compile_baseline=True), "cpu")

    def request(kind, *args, **kwargs):
        if kind == "compile_baseline":
            raise RuntimeError("worker closed")
        return dict(CORRECT)

    monkeypatch.setattr(ev, "_send", request)
    try:
        ev.evaluate("double", TASK, "a", late_baseline=True)
        settled = ev.settled_baselines(timeout_s=10)
        assert "worker closed" in settled["double"]["error"]  # known, not awaited for ever
    finally:
        ev.close()


def _recorded(archive, late, task, slot, extra, ref_ms=2.0, device="GPU-A"):
    program = archive.add_program(task=task, island=0, generation=0, operator="seed",
                                  source=f"# {task} {slot} {len(extra)} {ref_ms} {device}\n")
    result = EvalResult(status=Status.CORRECT, speedup=ref_ms, runtime_ms=1.0, ref_runtime_ms=ref_ms, extra=extra,
                        device=device)
    archive.record_evaluation(program, result)
    late.recorded(program, slot, result)
    return program.id


def _compiled(path, ids):
    reader = ArchiveReader(path=path)
    try:
        return {r["id"]: (r["compiled_runtime_ms"], r["speedup_vs_compiled"]) for r in reader.kernels(ids)}
    finally:
        reader.close()


PENDING = {"compile_baseline": "pending"}


def test_rows_recorded_before_the_baseline_are_filled_by_a_later_result_of_their_task_and_gpu_model(tmp_path):
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    late = LateBaselines(archive, evaluators=3)  # evaluators 0 and 1 on GPU-A, 2 on GPU-B
    try:
        early = [_recorded(archive, late, "t", 0, PENDING), _recorded(archive, late, "t", 1, PENDING, ref_ms=4.0)]
        other_model = _recorded(archive, late, "t", 2, PENDING, device="GPU-B")
        other_task = _recorded(archive, late, "u", 0, PENDING)
        assert late.pending == 4
        # Evaluator 0's ratio fills task t's rows of its GPU model, evaluator 1's too; nothing else.
        _recorded(archive, late, "t", 3, {"compile_baseline_ratio": 0.5})
        rows = _compiled(tmp_path / "a.db", [*early, other_model, other_task])
        assert rows[early[0]] == pytest.approx((1.0, 1.0)) and rows[early[1]] == pytest.approx((2.0, 2.0))
        assert rows[other_model] == (None, None) and rows[other_task] == (None, None)
        assert late.pending == 2

        class Backend(StandInBackend):  # the end of the run: each evaluator's settled baselines
            evaluator_count = 3

            def settled_baselines(self, ask=None):
                return [{"u": {"error": "torch.compile failed"}}, {"t": {"ratio": 0.5}}, {"t": {"ratio": 0.25}}]

        assert late.settle(Backend()) == 1 and late.pending == 0
        assert (late.late, late.filled) == (4, 3)
        rows = _compiled(tmp_path / "a.db", [other_model, other_task])
        assert rows[other_model] == pytest.approx((0.5, 0.5))  # GPU-B's own ratio (0.25 of its 2 ms eager)
        assert rows[other_task] == (None, None)  # its baseline failed: no figure, as for every result of it
    finally:
        archive.close()


def test_a_waiting_task_no_evaluator_measured_is_measured_at_the_end_spread_over_its_gpus(tmp_path):
    """A session stopped before its evaluators measured a task (each measures one task at a time) left
    its rows without a figure; the run's end measures such tasks, one evaluator each, in turn."""
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    late = LateBaselines(archive, evaluators=2)
    try:
        rows = [_recorded(archive, late, task, slot, PENDING) for slot, task in enumerate(["a", "b", "c"])]
        asked = []

        class Backend(StandInBackend):
            evaluator_count = 2

            def settled_baselines(self, ask=None):
                asked.append(ask)
                if ask is None:  # what each has: nothing yet
                    return [{}, {}]
                return [{task: {"ratio": 0.5} for task in one} for one in ask]

        assert late.settle(Backend(), {"a": "A", "b": "B", "c": "C", "other": "O"}) == 3
        assert asked == [None, [{"a": "A", "c": "C"}, {"b": "B"}]]  # only the waiting tasks, spread
        assert all(v == pytest.approx((1.0, 1.0)) for v in _compiled(tmp_path / "a.db", rows).values())
        assert late.settle(Backend(), {"a": "A"}) == 0 and len(asked) == 2  # nothing waits: nothing asked
    finally:
        archive.close()


def test_the_local_backend_asks_for_late_baselines_and_settles_them(monkeypatch):
    ev = Evaluator(EvaluatorSettings(device="cpu", compile_baseline=True), "cpu")
    calls = []
    monkeypatch.setattr(ev, "evaluate", lambda *args, **kwargs: calls.append(kwargs) or EvalResult(Status.CORRECT))
    monkeypatch.setattr(ev, "settled_baselines", lambda ask=None: {"t": {"ratio": 0.5}})
    backend = LocalBackend([None], lambda i: ev, 1)  # no island proposes here
    try:
        backend.evaluate(0, "t", TASK, "a").result(timeout=10)
        assert calls == [{"late_baseline": True}]
        assert backend.settled_baselines() == [{"t": {"ratio": 0.5}}]
    finally:
        backend.close()


@pytest.mark.slow
def test_evo_run_fills_in_every_late_rows_baseline(tmp_path):
    """`evo run` end to end (CPU, aot_eager: torch.compile without a C++ toolchain): results are not
    held for their task's baseline, yet every correct row has speedup_vs_compiled at the end."""
    import json
    import sqlite3

    from tests.test_cli import QUICK, evo

    run_dir = tmp_path / "run"
    out = evo("run", f"run.dir={run_dir}", "run.budget.evaluations=3", "evaluator.compile_baseline=true",
              "evaluator.compile_backend=aot_eager", *QUICK, timeout=600)
    assert out.returncode == 0, out.stderr
    db = sqlite3.connect(run_dir / "archive.db")
    rows = db.execute("select status, compiled_runtime_ms, speedup_vs_compiled from evaluations").fetchall()
    db.close()
    correct = [r for r in rows if r[0] == "correct"]
    assert len(correct) >= 3 and all(r[1] > 0 and r[2] > 0 for r in correct), rows
    done = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()][-1]
    assert done["event"] == "done" and done["compiled_baseline_filled"] == done["compiled_baseline_late"]


def test_a_resumed_runs_rows_without_the_baseline_are_filled_by_its_tasks_first_ratio(tmp_path):
    archive = Archive(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        before = LateBaselines(archive, evaluators=2)  # the session that stopped before the baseline came
        stopped = _recorded(archive, before, "t", 1, PENDING)
        gone = _recorded(archive, before, "gone", 0, PENDING)  # not in this session
        resumed = LateBaselines(archive, evaluators=2)
        resumed.resumed({"t": None})
        assert resumed.pending == 1
        _recorded(archive, resumed, "t", 2, {"compile_baseline_ratio": 0.5})  # evaluator 0, same GPU model
        rows = _compiled(tmp_path / "a.db", [stopped, gone])
        assert rows[stopped] == pytest.approx((1.0, 1.0)) and rows[gone] == (None, None)
    finally:
        archive.close()

"""Pipelined evaluation (evaluator.gate): several evaluations in flight per device, each timed
alone, the others stopped meanwhile; on the CPU through Triton's interpreter."""
import os
import subprocess
import threading
import time

import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evaluator.gate import TimingGate
from tests.support.candidates import TASK, candidate


class Member:
    """A stand-in for a sandbox worker: a process the gate may stop."""

    def __init__(self, proc):
        self.proc, self.paused_s = proc, 0.0

    def pid(self):
        return self.proc.pid


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _stopped(pid: int, want: bool = True, within_s: float = 2.0) -> bool:
    """Whether ``pid`` is (``want``) or is not stopped, within ``within_s``: a signal is delivered
    when its target is next scheduled, not by the time ``kill`` returns."""
    deadline = time.monotonic() + within_s
    while (_state(pid) == "T") != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return (_state(pid) == "T") == want


def _running(pid: int) -> bool:
    return _stopped(pid, want=False)


def _joined(*members) -> TimingGate:
    gate = TimingGate(drain_s=0.0)
    for member in members:
        gate.join(member)
    return gate


@pytest.fixture
def two_members():
    """Two members, each a process with a child of its own (a shell running sleep)."""
    from evaluator.containment import descendants

    procs = [subprocess.Popen(["sh", "-c", "sleep 30 & wait"]) for _ in range(2)]
    deadline = time.monotonic() + 10  # until each shell has forked its sleep (a loaded machine is slow to)
    while not all(descendants(p.pid) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield Member(procs[0]), Member(procs[1])
    for proc in procs:
        proc.kill()
        proc.wait()


def test_the_gate_stops_the_others_and_their_children_while_one_times(two_members):
    holder, other = two_members
    gate = _joined(holder, other)
    from evaluator.containment import descendants

    below = descendants(other.pid())
    assert below, "the member's child did not start"
    gate.acquire(holder)
    assert gate.holds(holder)
    assert all(_stopped(p) for p in [other.pid(), *below])
    assert _running(holder.pid())
    time.sleep(0.2)
    gate.release(other)  # not the holder's: nothing happens
    assert _stopped(other.pid())
    gate.release(holder)
    assert all(_running(p) for p in [other.pid(), *below])
    assert other.paused_s >= 0.2 and holder.paused_s == 0.0
    assert gate.held == 1 and not gate.holds(holder)


def test_a_second_acquire_waits_for_the_first_release():
    gate, a, b, order = TimingGate(drain_s=0.0), Member(None), Member(None), []
    a.pid = b.pid = lambda: None
    gate.acquire(a)

    def second():
        gate.acquire(b)
        order.append("b")
        gate.release(b)

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.2)
    order.append("a")
    gate.release(a)
    thread.join(5)
    assert order == ["a", "b"] and gate.waited_s >= 0.15


@pytest.fixture(scope="module")
def pipelined():
    ev = Evaluator(EvaluatorSettings(device="cpu", timeout_s=60, pipeline=2), "cpu")
    yield ev
    ev.close()


def _scored_together(evaluator, count: int) -> list:
    """``count`` distinct sources of the same kernel, evaluated from a thread each at once."""
    sources = [candidate(f"_variant = {i}") for i in range(count)]
    results = [None] * count

    def score(i):
        results[i] = evaluator.evaluate("double", TASK, sources[i])

    threads = [threading.Thread(target=score, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert all(r is not None and r.status == Status.CORRECT for r in results), [r and r.reason for r in results]
    return results


@pytest.mark.slow
def test_pipelined_evaluations_are_timed_one_at_a_time_and_all_scored(pipelined):
    assert pipelined.depth == 2 and len(pipelined.workers) == 2 and pipelined.gate is not None
    results = _scored_together(pipelined, 4)
    windows = sorted(r.extra["timed_window"] for r in results)
    for (_, end), (start, _) in zip(windows, windows[1:]):
        assert end <= start, f"two timings overlapped: {windows}"
    assert pipelined.gate.held == len(results)
    assert any(r.extra["phases"].get("gate_wait_s", 0) >= 0 for r in results)


@pytest.mark.slow
def test_the_baseline_is_measured_on_a_worker_of_its_own_while_the_pipeline_goes_on():
    # aot_eager: torch.compile without a C++ toolchain (inductor on GPUs).
    settings = EvaluatorSettings(device="cpu", timeout_s=60, pipeline=2, compile_baseline=True,
                                 compile_backend="aot_eager")
    ev = Evaluator(settings, "cpu")
    try:
        results = _scored_together(ev, 3)
        assert all(r.compiled_runtime_ms and r.speedup_vs_compiled for r in results)  # one ratio, for each
        assert len(ev.baselines.entries()) == 1 and ev.baselines.worker not in ev.workers
        assert ev.baselines.worker in ev.gate._members  # stopped while an evaluation times, like the others
        assert ev.gate.held == len(results) + 1  # the baseline timed alone too
    finally:
        ev.close()


@pytest.mark.slow
def test_the_baseline_starts_with_the_first_evaluation_of_its_task_not_after_it(monkeypatch):
    """evaluator.prefetch_baseline: the task's baseline request goes out while its first evaluation is
    still under way (here: an evaluation that takes 0.5 s), once per task; off, only after it."""
    for prefetch in (True, False):
        ev = Evaluator(EvaluatorSettings(device="cpu", compile_baseline=True, prefetch_baseline=prefetch), "cpu")
        log: list[tuple[str, str, float]] = []

        def request(kind, task_name, task_source, *, worker=None, **extra):
            log.append((kind, "asked", time.monotonic()))
            if kind == "evaluate":
                time.sleep(0.5)
                reply = {"status": "incorrect", "reason": "stub", "ref_runtime_ms": 1.0}
            else:
                reply = {"ratio": 0.5}
            log.append((kind, "answered", time.monotonic()))
            return reply

        monkeypatch.setattr(ev, "_send", request)
        try:
            for source in ("a", "b"):
                ev.evaluate("double", TASK, source)
            asked = [t for kind, what, t in log if kind == "compile_baseline" and what == "asked"]
            first_done = next(t for kind, what, t in log if kind == "evaluate" and what == "answered")
            assert len(asked) == 1  # once per task and device
            assert (asked[0] < first_done) is prefetch
        finally:
            monkeypatch.undo()
            ev.close()


def test_a_pipelined_evaluation_that_fails_releases_the_gate(pipelined):
    broken = candidate("raise RuntimeError('broken on purpose')")
    assert pipelined.evaluate("double", TASK, broken).status == Status.RUNTIME_ERROR
    assert not pipelined.gate.holds(pipelined.workers[0]) and not pipelined.gate.holds(pipelined.workers[1])
    assert pipelined.evaluate("double", TASK, candidate()).status == Status.CORRECT


def test_pipeline_depth_defaults_and_validation():
    assert Evaluator(EvaluatorSettings(device="cpu"), "cpu").depth == 1
    # Decided once for the device (the run's start-up), then a number passed down.
    assert EvaluatorSettings().on("cuda").pipeline == 3 and EvaluatorSettings().on("cpu").pipeline == 1
    decided = EvaluatorSettings(pipeline=2)
    assert decided.on("cuda") is decided and decided.on("cpu").pipeline == 2
    with pytest.raises(ValueError, match="pipeline"):
        EvaluatorSettings(pipeline=0)
    from evaluator.evaluator import evaluation_slots

    # One evaluation waiting beside a pipeline: a freed worker starts the next at once.
    assert evaluation_slots(3) == 4 and evaluation_slots(1) == 1
    assert Evaluator(EvaluatorSettings(device="cpu", pipeline=2), "cpu").slots == 3


def test_a_member_taking_a_request_goes_on_at_once_and_is_stopped_at_its_first_gpu_work(two_members):
    holder, starting = two_members
    gate = _joined(holder, starting)
    gate.acquire(holder)
    assert _stopped(starting.pid())  # idle, stopped like any other member
    gate.compiling(starting)  # a request for it: its start is host work
    assert _running(starting.pid())
    from evaluator.containment import descendants

    assert all(_running(pid) for pid in descendants(starting.pid()))
    gate.compiled(starting)  # its child's start is over (host_start_over): stopped until the timing ends
    assert _stopped(starting.pid())
    gate.release(holder)
    assert _running(starting.pid())


def test_host_sections_nest_and_the_start_waits_for_the_go_ahead():
    from evaluator import gate as gate_module

    want_r, want_w = os.pipe()
    go_r, go_w = os.pipe()
    os.write(go_w, b"GG")  # the go-ahead for the start, then for the section
    gate_module.host_start_over([want_w, go_r])
    drained = []
    with gate_module.host_section([want_w, go_r], lambda: drained.append(1)):
        with gate_module.host_section([want_w, go_r], lambda: drained.append(2)):  # one section
            pass
    assert os.read(want_r, 8) == b"ECE" and drained == [1]
    gate_module.host_start_over(None)  # no gate: nothing written, nothing waited for
    with gate_module.host_section(None, lambda: drained.append(3)):
        pass
    assert drained == [1]
    for fd in (want_r, want_w, go_r, go_w):
        os.close(fd)


def test_after_its_timing_an_evaluation_says_it_is_on_host_work_before_letting_the_gate_go():
    from evaluator import gate as gate_module

    want_r, want_w = os.pipe()
    go_r, go_w = os.pipe()
    drained = []
    os.write(go_w, b"GGG")
    with gate_module.gpu_alone([want_w, go_r], host_after=lambda: drained.append(1)):
        pass
    assert os.read(want_r, 8) == b"WCD" and drained == [1]  # drained, spared, then the gate let go
    with gate_module.gpu_alone([want_w, go_r]):
        pass
    assert os.read(want_r, 8) == b"WD"
    with pytest.raises(RuntimeError):  # a timing that failed: no host work claimed
        with gate_module.gpu_alone([want_w, go_r], host_after=lambda: drained.append(2)):
            raise RuntimeError("the candidate failed while timed")
    assert os.read(want_r, 8) == b"WD" and drained == [1]
    for fd in (want_r, want_w, go_r, go_w):
        os.close(fd)


def test_the_baseline_compile_is_a_host_section_and_its_first_call_is_not(monkeypatch):
    """inductor's compile (compile_fx) in the torch.compile baseline's process: spared by the gate in
    modes that run nothing on the GPU while compiling; restored after the first call."""
    import torch
    import torch._inductor.compile_fx as compile_fx_module

    from evaluator import baseline

    events = []
    monkeypatch.setattr(compile_fx_module, "compile_fx", lambda gm, inputs: events.append("compile") or gm)
    # inductor's wrapper looks compile_fx up in its module when dynamo hands it a graph: so does this one.
    monkeypatch.setattr(torch, "compile", lambda model, backend, mode: (
        lambda *inputs: compile_fx_module.compile_fx(model, inputs)(*inputs)))
    original = compile_fx_module.compile_fx
    want_r, want_w = os.pipe()
    go_r, go_w = os.pipe()
    os.write(go_w, b"G")
    baseline.compiled_reference(lambda x: events.append("call") or x, [1], backend="inductor", mode=None,
                                gate_fds=[want_w, go_r])
    assert events == ["compile", "call"] and os.read(want_r, 8) == b"CE"
    assert compile_fx_module.compile_fx is original
    events.clear()
    baseline.compiled_reference(lambda x: x, [1], backend="inductor", mode="max-autotune", gate_fds=[want_w, go_r])
    assert events == ["compile"]  # benchmarks on the GPU while compiling: not spared (nothing written)
    os.write(want_w, b"x")
    assert os.read(want_r, 8) == b"x"
    for fd in (want_r, want_w, go_r, go_w):
        os.close(fd)


def test_a_member_inside_a_compile_is_spared_and_stopped_when_it_leaves(two_members):
    holder, compiling = two_members
    gate = _joined(holder, compiling)
    gate.compiling(compiling)
    gate.acquire(holder)
    assert _running(compiling.pid()) and gate.spared == 1  # its compile goes on meanwhile
    gate.compiled(compiling)  # about to use the GPU while the holder times: stopped
    assert _stopped(compiling.pid())
    gate.compiled(compiling)  # no compile left to end: nothing changes
    gate.release(holder)
    assert _running(compiling.pid())
    gate.compiling(compiling)
    gate.compiled(compiling)  # nobody timing: it goes straight on
    assert _running(compiling.pid())
    gate.acquire(holder)  # no longer compiling: stopped like any other member
    assert _stopped(compiling.pid())
    gate.release(holder)


def test_compile_sections_announce_each_compile_and_wait_for_the_go_ahead(monkeypatch):
    from triton.runtime.jit import JITFunction

    from evaluator import gate as gate_module

    calls = []
    monkeypatch.setattr(JITFunction, "_do_compile", lambda kernel, *args: calls.append(args) or "compiled",
                        raising=False)
    want_r, want_w = os.pipe()
    go_r, go_w = os.pipe()
    drained = []
    assert gate_module.compile_sections([want_w, go_r], lambda: drained.append(1))
    assert not gate_module.compile_sections([want_w, go_r], lambda: None)  # installed once
    os.write(go_w, b"G")  # the gate's go-ahead, waiting for the compile to end
    assert JITFunction._do_compile(object(), "key") == "compiled"
    assert calls == [("key",)] and drained == [1]
    assert os.read(want_r, 8) == b"CE"  # compiling, then compiled
    for fd in (want_r, want_w, go_r, go_w):
        os.close(fd)
    assert not gate_module.compile_sections(None, lambda: None)  # no gate: Triton left as it is


def test_preparation_streams_each_task_and_its_workers_are_gate_members_while_they_work(monkeypatch):
    """A task prepared during a search (evo.loop.arrivals): its outcome comes as soon as it is known, and
    its workers are stopped while a candidate times like the pipeline's (then leave the gate)."""
    from evaluator import Preparation

    ev = Evaluator(EvaluatorSettings(device="cpu", pipeline=2), "cpu")
    members_seen = []

    def request(kind, task_name, task_source, *, worker=None, **extra):
        members_seen.append(worker in ev.gate._members and worker not in ev.workers)
        if task_name == "slow":
            time.sleep(0.5)
        return {"ok": True}

    monkeypatch.setattr(ev, "_send", request)
    try:
        tasks = [Preparation("slow", TASK, False), Preparation("fast", TASK, False)]
        assert [name for name, _ in ev.prepare_stream(tasks, parallel=2)] == ["fast", "slow"]
        assert members_seen == [True, True]
        assert ev.gate._members == ev.workers  # the preparation's workers left with it
    finally:
        monkeypatch.undo()
        ev.close()


@pytest.mark.slow
def test_a_reference_is_checked_through_the_gate_of_a_pipeline():
    """check_task is a gated request now (its start spared, its GPU work stopped while another times)."""
    from evaluator import Preparation

    ev = Evaluator(EvaluatorSettings(device="cpu", timeout_s=60, pipeline=2), "cpu")
    try:
        outcome = ev.prepare([Preparation("double", TASK, False)], parallel=1)["double"]
        assert outcome.check.ok, outcome
        assert ev.gate._members == ev.workers and not ev.gate._compiling
    finally:
        ev.close()

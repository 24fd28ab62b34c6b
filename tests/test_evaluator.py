"""The evaluator in its sandbox, on the CPU through Triton's interpreter."""
import os

import pytest

from evaluator import EvalResult, Evaluator, EvaluatorSettings, Status
from evaluator.sandbox import worker_environment
from tests.support.candidates import TASK, candidate

@pytest.fixture(scope="module")
def evaluator():
    ev = Evaluator(EvaluatorSettings(device="cpu", timeout_s=20), "cpu")
    yield ev
    ev.close()


@pytest.mark.slow
def test_correct_candidate_is_timed_side_by_side(evaluator):
    result = evaluator.evaluate("double", TASK, candidate())
    assert result.status is Status.CORRECT, result.reason
    assert result.shapes_checked == 2
    assert result.runtime_ms > 0 and result.ref_runtime_ms > 0
    assert result.speedup == pytest.approx(result.ref_runtime_ms / result.runtime_ms)
    assert result.timing_representative is False and "interpreter" in result.device


@pytest.mark.parametrize("change, status, reason", [
    ("out = out", Status.CORRECT, "passed"),
    ("out = torch.zeros_like(x); n = n - 1 if n > 200 else n", Status.INCORRECT, "shape {'n': 4097}"),
    ("x.fill_(1.0)", Status.INCORRECT, "modified its inputs"),  # fill_ is glue; mul_ is not
    ("raise ValueError('boom')", Status.RUNTIME_ERROR, "ValueError: boom"),
    ("import faulthandler; faulthandler._sigsegv()", Status.CRASHED, "signal 11"),
    ("import time; time.sleep(60)", Status.TIMEOUT, "process group killed"),
])
@pytest.mark.slow
def test_failures_are_classified(evaluator, change, status, reason):
    result = evaluator.evaluate("double", TASK, candidate(change))
    assert result.status is status, result.reason
    assert reason in result.reason


CHEATS = {
    "torch only, kernel never launched": (
        "return x * 2.0", Status.REJECTED, "launched no Triton kernel"),
    "kernel launched, real work in torch.mm": ("", Status.REJECTED, "PyTorch's add, mm, mul"),
    "a thread does the work": ("import threading", Status.REJECTED, "imports threading"),
    "another CUDA stream": ("s = torch.cuda.Stream()", Status.REJECTED, "torch.cuda.Stream"),
    "output caching": (
        "global CACHE\n        if 'CACHE' in globals(): return CACHE", Status.INCORRECT, ""),
    "saturates on large values": ("", Status.INCORRECT, "very large values"),
    "non-deterministic": ("import random; seed = random.randrange(1 << 30)", Status.INCORRECT, "not deterministic"),
    "unwritten tail": ("n = n - 1 if n > 200 else n", Status.INCORRECT, "NaN"),
}


@pytest.mark.parametrize("name", list(CHEATS))
def test_cheats_are_caught(evaluator, name):
    change, status, reason = CHEATS[name]
    source = candidate(change)
    if name == "torch only, kernel never launched":
        source = candidate().replace("        out = torch.empty_like(x)", "        return x * 2.0")
    if name == "kernel launched, real work in torch.mm":
        source = candidate().replace("        return out", "        return (x[:, None] @ x[None, :]).diagonal() * 0 + x * 2")
    if name == "output caching":
        source = source.replace("        return out", "        CACHE = out\n        return out")
    if name == "saturates on large values":
        source = source.replace("tl.load(x_ptr + offs, mask=mask) * 2.0",
                                "tl.minimum(tl.maximum(tl.load(x_ptr + offs, mask=mask), -100.0), 100.0) * 2.0")
    if name == "non-deterministic":  # noise of its own in the kernel, seeded differently on each call
        source = source.replace("out_ptr, n, BLOCK", "out_ptr, n, seed, BLOCK").replace(
            "mask=mask) * 2.0", "mask=mask) * 2.0 + tl.rand(seed, offs) * 1e-7").replace(
            "(x, out, n, BLOCK", "(x, out, n, seed, BLOCK")
    result = evaluator.evaluate("double", TASK, source)
    assert result.status is status, result.reason
    assert reason in result.reason


def test_replacing_the_timer_is_rejected(evaluator):
    source = "import time\ntime.perf_counter = lambda: 0.0\n" + candidate()
    result = evaluator.evaluate("double", TASK, source)
    assert result.status is Status.REJECTED and "time.perf_counter" in result.reason


def test_a_kernel_that_is_defined_but_never_launched_is_rejected(evaluator):
    lazy = candidate().replace("double_kernel[(triton.cdiv(n, BLOCK_SIZE),)]", "(lambda *a, **k: None)")
    lazy = lazy.replace("torch.empty_like(x)", "(x * 2.0)")
    result = evaluator.evaluate("double", TASK, lazy)
    assert result.status is Status.REJECTED and "launched no Triton kernel" in result.reason


def test_compile_errors(evaluator):
    assert evaluator.evaluate("double", TASK, candidate().replace("def forward", "def forward(")).status \
        is Status.COMPILE_ERROR
    broken_kernel = candidate().replace("tl.arange(0, BLOCK_SIZE)", "tl.arange(0, BLOCK_SIZE) + undefined_name")
    result = evaluator.evaluate("double", TASK, broken_kernel)
    assert result.status is Status.COMPILE_ERROR  # as on a GPU (tests/test_error_status.py)
    assert "undefined_name" in result.error


def test_candidates_without_a_triton_kernel_are_rejected(evaluator):
    torch_only = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 2.0\n"
    result = evaluator.evaluate("double", TASK, torch_only)
    assert result.status is Status.REJECTED and "Triton kernel" in result.reason
    assert evaluator.evaluate("double", TASK, "x = 1\n").status is Status.REJECTED


def test_worker_survives_bad_candidates(evaluator):
    evaluator.evaluate("double", TASK, candidate("import faulthandler; faulthandler._sigsegv()"))
    assert evaluator.evaluate("double", TASK, candidate()).status is Status.CORRECT


@pytest.mark.slow
def test_secrets_never_reach_the_candidate(evaluator, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok")
    env = worker_environment("cpu", None, __import__("pathlib").Path("/tmp"), __import__("pathlib").Path("/tmp"))
    assert "OPENAI_API_KEY" not in env and "MY_SERVICE_TOKEN" not in env
    evaluator.worker.close()  # a fresh worker started under the secret-laden environment
    leak = candidate("import os\n        assert not any('KEY' in k or 'TOKEN' in k for k in os.environ), 'leak'")
    result = evaluator.evaluate("double", TASK, leak)
    assert result.status is Status.CORRECT, result.reason


def test_a_workers_gpu_is_counted_among_those_this_process_sees(monkeypatch, tmp_path):
    """Under CUDA_VISIBLE_DEVICES=2,3 (a scheduler's allocation), evaluator 0's workers run on GPU 2:
    a worker told "0" would run on the machine's GPU 0, beside another job or another run."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert worker_environment("cuda", 1, tmp_path, tmp_path)["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert [worker_environment("cuda", i, tmp_path, tmp_path)["CUDA_VISIBLE_DEVICES"] for i in (0, 1)] == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aa, GPU-bb")
    assert worker_environment("cuda", 1, tmp_path, tmp_path)["CUDA_VISIBLE_DEVICES"] == "GPU-bb"
    assert worker_environment("cuda", None, tmp_path, tmp_path)["CUDA_VISIBLE_DEVICES"] == "GPU-aa, GPU-bb"
    with pytest.raises(ValueError, match="GPU 2 is not among the 2"):
        worker_environment("cuda", 2, tmp_path, tmp_path)


def test_check_task_reports_a_failing_reference(evaluator):
    assert evaluator.check_task("double", TASK).ok
    failing = TASK.replace("return x * 2.0", "raise RuntimeError('reference broke')")
    check = evaluator.check_task("double", failing)
    assert not check.ok and check.stage == "reference" and "reference broke" in check.error
    constant = TASK.replace("return x * 2.0", "return torch.ones(3)")
    assert evaluator.check_task("double", constant).warnings
    nearly_constant = TASK.replace("return x * 2.0", "return 1.0 + 1e-7 * x")
    assert "barely depends" in evaluator.check_task("double", nearly_constant).warnings[0]


def test_result_round_trips_through_a_dict():
    result = EvalResult(status=Status.CORRECT, speedup=1.5, runtime_ms=1.0, ref_runtime_ms=1.5)
    assert EvalResult.from_dict(result.to_dict()) == result


def test_settings_are_validated():
    with pytest.raises(ValueError, match="auto, cpu or cuda"):
        EvaluatorSettings(device="tpu")
    with pytest.raises(ValueError, match="seed"):
        EvaluatorSettings(seeds=())
    with pytest.raises(ValueError, match="compile_timing"):
        EvaluatorSettings(compile_timing="sometimes")
    with pytest.raises(ValueError, match="time_shapes"):
        EvaluatorSettings(time_shapes="some")
    assert os.environ.get("TRITON_INTERPRET") == "1"


def _with(evaluator, **changes):
    """The module's evaluator with some settings changed for one test (they travel per request)."""
    import dataclasses

    evaluator.settings = dataclasses.replace(evaluator.settings, **changes)
    return evaluator


@pytest.fixture
def settings_restored(evaluator):
    saved = evaluator.settings
    yield
    evaluator.settings = saved


def test_result_reports_noise_work_and_phases(evaluator):
    result = evaluator.evaluate("double", TASK, candidate())
    assert result.status is Status.CORRECT
    assert result.speedup_noise >= evaluator.settings.noise_floor
    assert result.ref_runtime_spread is not None
    assert result.roofline_fraction is None  # the interpreter's speed says nothing about a roofline
    assert "bytes of inputs and outputs" in result.extra["work"]
    phases = result.extra["phases"]
    assert set(phases) == {"load_s", "checks_s", "timing_s", "timed_calls_s", "host_s", "total_s",
                           "reference_s", "smoke_s", "adversarial_s", "shapes_s",  # parts of load and checks
                           "state_s",  # the interpreter's state, taken and compared (load, checks, timing)
                           "inputs_s", "interleaved_s", "timed_checks_s", "roofline_s"}  # parts of timing
    assert 0 < phases["timed_calls_s"] <= phases["interleaved_s"] <= phases["timing_s"] <= phases["total_s"]
    assert phases["reference_s"] <= phases["load_s"]
    assert phases["smoke_s"] + phases["adversarial_s"] + phases["shapes_s"] <= phases["checks_s"] + 1e-6
    parts = ("inputs_s", "interleaved_s", "timed_checks_s", "roofline_s")
    assert sum(phases[p] for p in parts) <= phases["timing_s"] + 1e-6


def test_a_speedup_beyond_the_roofline_is_reverified_then_rejected(evaluator, settings_restored):
    # Peaks far below what the candidate reaches: every timing is "faster than the hardware".
    _with(evaluator, roofline_peaks={"bytes_per_s": 1e3, "flops_per_s": 1e3})
    result = evaluator.evaluate("double", TASK, candidate())
    assert result.status is Status.REJECTED
    assert "roofline" in result.reason and "re-verification" in result.reason
    _with(evaluator, roofline_peaks={"bytes_per_s": 1e15, "flops_per_s": 1e15})
    plausible = evaluator.evaluate("double", TASK, candidate())
    assert plausible.status is Status.CORRECT and 0 < plausible.roofline_fraction < 1


@pytest.mark.parametrize("timing", ["live", "cached"])
@pytest.mark.slow
def test_torch_compile_baseline_is_timed(evaluator, settings_restored, timing):
    # aot_eager exercises the path without a C++ toolchain; on GPUs the default is inductor.
    _with(evaluator, compile_baseline=True, compile_backend="aot_eager", compile_timing=timing)
    result = evaluator.evaluate("double", TASK, candidate())
    assert result.status is Status.CORRECT, result.reason
    assert result.compiled_runtime_ms > 0 and "compile_baseline_error" not in result.extra
    assert result.speedup_vs_compiled == pytest.approx(result.compiled_runtime_ms / result.runtime_ms)
    if timing == "cached":  # measured once per task and device, apart from any candidate's process
        again = evaluator.evaluate("double", TASK, candidate("_again = 1"))
        assert "baseline_compile_s" not in again.extra["phases"]  # the first may have waited for it, not this one
        assert len(evaluator.baselines.entries()) == 1
        ratio = next(iter(evaluator.baselines.entries().values()))["ratio"]
        assert again.compiled_runtime_ms == pytest.approx(ratio * again.ref_runtime_ms)


def test_every_shape_set_is_timed_when_asked(evaluator, settings_restored):
    assert "shape_timings" not in evaluator.evaluate("double", TASK, candidate()).extra
    _with(evaluator, time_shapes="all")
    result = evaluator.evaluate("double", TASK, candidate())
    assert result.status is Status.CORRECT, result.reason
    timings = result.extra["shape_timings"]
    assert [(t["shape"], t["numel"]) for t in timings] == [({"n": 127}, 127), ({"n": 4097}, 4097)]
    assert all(t["speedup"] > 0 and t["speedup_noise"] >= 0.01 and t["runtime_ms"] > 0 for t in timings)
    assert timings[-1]["speedup"] == pytest.approx(result.speedup)  # the largest is the main timing


def test_a_candidate_over_the_memory_limit_is_killed(evaluator, settings_restored):
    _with(evaluator, memory_limit_mb=1500)
    hog = candidate("hog = torch.ones(1 << 30, dtype=torch.float32); import time; time.sleep(5)")
    result = evaluator.evaluate("double", TASK, hog)
    assert result.status is Status.CRASHED and "memory" in result.reason
    assert evaluator.evaluate("double", TASK, candidate()).status is Status.CORRECT


def test_a_tensor_subclass_output_is_incorrect(evaluator):
    lazy = candidate().replace("        return out", "        return torch.nn.Parameter(out, requires_grad=False)"
                               ".as_subclass(Lazy)")
    lazy = lazy.replace("class ModelNew", "class Lazy(torch.Tensor):\n    pass\n\nclass ModelNew")
    result = evaluator.evaluate("double", TASK, lazy)
    assert result.status is Status.INCORRECT and "tensor subclass" in result.reason


def test_candidates_have_no_network(evaluator):
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    probe = evaluator.evaluate("double", TASK, candidate())
    if not probe.extra.get("network", "").startswith("isolated"):
        pytest.skip(f"this machine allows no network namespace: {probe.extra.get('network')}")
    # __import__ gets past the static check: this is the run-time layer's test.
    phone_home = candidate(f"__import__('soc' + 'ket').create_connection(('127.0.0.1', {port}), timeout=2)")
    result = evaluator.evaluate("double", TASK, phone_home)
    assert result.status is Status.RUNTIME_ERROR
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()


def test_roofline_peaks_come_from_the_evaluator_never_from_a_candidate_writable_file():
    from evaluator.roofline import peaks_for

    assert peaks_for(None) is None
    given = peaks_for({"bytes_per_s": 3e12, "flops_per_s": 9e14, "source": "measured on H100"})
    assert (given.bytes_per_s, given.flops_per_s, given.source) == (3e12, 9e14, "measured on H100")
    assert peaks_for({"bytes_per_s": 1, "flops_per_s": 2}).source == "configured"


def test_an_evaluation_says_how_many_reps_it_timed_and_checks_calls_drawn_from_all_that_ran(evaluator,
                                                                                             settings_restored):
    from evaluator.settings import TimingSettings

    # As loose a precision as allowed: the interpreter's ratios are noisy (at 0.5 a run on an idle
    # 2-core host once went all 60 reps), and this test is about the count, not the stopping rule.
    loose = TimingSettings(warmup=1, reps=60, budget_s=120.0, batch=1, precision=0.95, min_reps=5)
    result = _with(evaluator, cpu_timing=loose).evaluate("double", TASK, candidate())
    assert result.status is Status.CORRECT, result.reason
    reps = result.extra["timed_reps"]
    assert 5 <= reps <= 60  # whether the rule stops early is tests/test_timing.py's (a fake clock)
    # Three outputs kept, each drawn after its call returned, from the calls made (warm-up and reps).
    kept = result.extra["timed_checks"]["kept_checked"]
    assert len(kept) == 3 and max(kept) <= 1 + reps
    with pytest.raises(ValueError, match="precision"):
        EvaluatorSettings(timing=TimingSettings(precision=1.0))
    with pytest.raises(ValueError, match="min_reps"):
        EvaluatorSettings(cpu_timing=TimingSettings(min_reps=2))

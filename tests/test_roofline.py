"""The roofline: counted FLOPs where a task declares none, the compute floor by dtype, the bound
stored with each evaluation and shown per task, and only declared work held against the hardware."""
import pytest
import torch

from archive import Archive
from archive.queries import ArchiveReader
from evaluator import Evaluator, EvaluatorSettings, Status
from evaluator.result import EvalResult
from evaluator.roofline import Peaks, Work, floors, fraction, work_of
from evo.views.summary import status_table
from tests.test_precision_operator import KERNEL, TASK

PEAKS = Peaks(bytes_per_s=1e12, flops_per_s=4e12, source="configured", tf32_flops_per_s=1e12)


class _Problem:
    pass


def test_flops_are_counted_where_the_task_declares_none():
    a, b = torch.randn(32, 64), torch.randn(64, 16)
    work = work_of(_Problem(), [a, b], lambda: a @ b)
    assert work.flops == 2 * 32 * 64 * 16 and not work.flops_declared and work.dtype == torch.float32
    assert work.bytes == 4 * (32 * 64 + 64 * 16 + 32 * 16) and not work.declared
    declared = _Problem()
    declared.flops = lambda a, b: 7.0
    assert work_of(declared, [a, b], lambda: a @ b).flops == 7.0


def test_the_compute_floor_uses_the_peak_for_the_outputs_dtype():
    assert PEAKS.flops_for(torch.float16) == 4e12 and PEAKS.flops_for(torch.float32) == 1e12
    assert Peaks(1e12, 4e12, "configured").flops_for(torch.float32) == 2e12  # TF32 at half of fp16 unless given
    gemm = Work(bytes=1e6, flops=1e10, declared=False, flops_declared=False, dtype=torch.float32)
    assert floors(gemm, PEAKS) == {"memory_ms": 1e-3, "compute_ms": 10.0, "floor_ms": 10.0, "bound": "compute"}
    elementwise = Work(bytes=1e9, flops=0.0, declared=False, dtype=torch.float32)
    assert floors(elementwise, PEAKS)["bound"] == "memory"
    assert fraction(gemm, 20.0, PEAKS) == pytest.approx(0.5)
    assert fraction(gemm, 20.0, PEAKS, declared_only=True) == pytest.approx(1e-3 / 20.0)  # counted FLOPs left out


@pytest.mark.slow
def test_counted_flops_show_the_bound_but_never_reject_a_kernel():
    # Peaks so low in FLOPs that the counted work is "faster than the hardware": shown, not held against it.
    settings = EvaluatorSettings(device="cpu", timeout_s=120, roofline_peaks={"bytes_per_s": 1e15, "flops_per_s": 1.0})
    evaluator = Evaluator(settings, "cpu")
    try:
        result = evaluator.evaluate("mm", TASK, KERNEL)
    finally:
        evaluator.close()
    assert result.status is Status.CORRECT, result.reason
    roofline = result.extra["roofline"]
    assert roofline["bound"] == "compute" and roofline["flops_counted"] and result.roofline_fraction > 1
    assert roofline["checked_fraction"] < 1e-3 and "FLOPs counted" in result.extra["work"]


def test_the_floor_and_bound_are_stored_and_shown_per_task(tmp_path):
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    program = archive.add_program(task="mm", island=0, generation=0, operator="seed", source=KERNEL)
    archive.record_evaluation(program, EvalResult(
        status=Status.CORRECT, speedup=2.0, runtime_ms=3.0, ref_runtime_ms=6.0, compiled_runtime_ms=4.0,
        roofline_fraction=0.5,
        extra={"roofline": {"memory_ms": 0.1, "compute_ms": 1.5, "floor_ms": 1.5, "bound": "compute"}}))
    archive.close()
    best = ArchiveReader(path=tmp_path / "archive.db").best_kernels("mm", 1)[0]
    assert (best["floor_ms"], best["roofline_bound"], best["compiled_runtime_ms"]) == (1.5, "compute", 4.0)
    row = dict(task="mm", programs=1, evaluations=1, correct=1, best_speedup=2.0, best_ms=3.0, compiled_ms=4.0,
               floor_ms=1.5, bound="compute", cells=1, coverage=0.1, qd_score=2.0)
    table = status_table([row], title="t")
    cells = [str(c._cells[0]) for c in table.columns]
    assert cells[5:8] == ["3", "4", "1.5 (compute)"]

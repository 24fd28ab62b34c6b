"""Profile-guided prompts: what the model is told of a parent's evaluation, within a token budget.

The golden prompt (tests/data/prompts/profiled_rewrite.txt) is a rewrite prompt for a parent profiled
on a GPU (three kernels, floors, eager and torch.compile times) with one profiled inspiration; after a
deliberate change of the words, write it again with ``EVO_UPDATE_GOLDEN=1 pytest tests/test_profile_prompts.py``
and read the diff.
"""
import os
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from archive import Archive
from archive.models import LLMCallRow
from archive.queries import ArchiveReader
from evaluator.kernel_profile import aggregate, breakdown, occupancy, with_compiled
from evaluator.result import EvalResult, Status
from evo.core.program import Program
from operators.base import Context
from operators.prompting import FULL, TRIM_STEPS, _render, render
from operators.prompt_facts import error_excerpt, kernel_rows

GOLDEN = Path(__file__).parent / "data" / "prompts" / "profiled_rewrite.txt"
H100 = {"max_threads_per_sm": 2048, "registers_per_sm": 65536, "shared_bytes_per_sm": 233472}
BYTES_PER_S, FLOPS_PER_S = 3.35e12, 9.9e14
MB32 = 4096 * 4096 * 2  # one fp16 4096 x 4096 tensor

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x.float(), dim=-1).half()


def get_inputs():
    return [torch.randn(4096, 4096, dtype=torch.float16)]


def get_init_inputs():
    return []
'''
PARENT = '''import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 1024


@triton.jit
def _fused_softmax_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _fused_softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK_SIZE=BLOCK_SIZE)
        return out
'''


def profiled_parent() -> dict:
    """What the evaluator records of the parent's audited batch: 10 calls, three kernels of its own
    (one launched twice per call) and a memset."""
    events = ([("_fused_softmax_kernel", 7, 30.0)] * 10 + [("_row_max_kernel", 7, 12.0)] * 20
              + [("_scale_kernel", 7, 4.0)] * 10 + [("Memset (Device)", 7, 1.0)] * 10)
    profile = breakdown(aggregate(events), 10, {"_fused_softmax_kernel", "_row_max_kernel", "_scale_kernel"},
                        {"_fused_softmax_kernel": 10 * 2 * MB32, "_row_max_kernel": 20 * MB32,
                         "_scale_kernel": 10 * 2 * 4096 * 4}, 5e7, BYTES_PER_S, FLOPS_PER_S)
    compiled = [dict(name="_fused_softmax_kernel", registers=32, spills=0, shared_bytes=0, num_warps=8),
                dict(name="_row_max_kernel", registers=40, spills=0, shared_bytes=1024, num_warps=4),
                dict(name="_scale_kernel", registers=24, spills=2, shared_bytes=0, num_warps=4)]
    return with_compiled(profile, compiled, H100)


def roofline(runtime_ms: float) -> dict:
    memory_ms, compute_ms = 2 * MB32 / BYTES_PER_S * 1e3, 5e7 / FLOPS_PER_S * 1e3
    return {"memory_ms": memory_ms, "compute_ms": compute_ms, "floor_ms": memory_ms, "bound": "memory",
            "bytes_per_s": BYTES_PER_S, "flops_per_s": FLOPS_PER_S}


def gpu_result(runtime_ms: float, profile: dict | None, registers: int = 40, spills: int = 2, num_warps: int = 8,
               bound: str = "memory") -> EvalResult:
    floor = dict(roofline(runtime_ms), bound=bound)
    extra = {"roofline": floor, **({"kernel_profile": profile} if profile else {})}
    return EvalResult(status=Status.CORRECT, speedup=0.0836 / runtime_ms, runtime_ms=runtime_ms, ref_runtime_ms=0.0836,
                      compiled_runtime_ms=0.0601, roofline_fraction=floor["floor_ms"] / runtime_ms,
                      timing_representative=True, device="NVIDIA H100 80GB HBM3", registers=registers,
                      spills=spills, num_warps=num_warps, extra=extra)


def program(pid: int, result: EvalResult, source: str = PARENT) -> Program:
    return Program(id=pid, task="softmax", island=0, generation=1, operator="llm_diff", source=source,
                   result=result, descriptors={"memory": "plain", "compute": "single_pass"})


def inspiration() -> Program:
    one = breakdown(aggregate([("_softmax_kernel", 7, 50.0)] * 10), 10, {"_softmax_kernel"},
                    {"_softmax_kernel": 10 * 2 * MB32}, 5e7, BYTES_PER_S, FLOPS_PER_S)
    one = with_compiled(one, [dict(name="_softmax_kernel", registers=64, spills=0, shared_bytes=0, num_warps=4)],
                        H100)
    return program(2, gpu_result(0.0512, one, registers=64, spills=0, num_warps=4), PARENT.replace("_fused_softmax_kernel", "_softmax_kernel"))


def context() -> Context:
    return Context(task_name="softmax", task_source=TASK, parent=program(1, gpu_result(0.0452, profiled_parent())),
                   inspirations=[inspiration()], hardware="NVIDIA H100 80GB HBM3",
                   failures=[{"operator": "llm_rewrite", "status": "incorrect", "stage": "shape sets",
                              "reason": "shape {'N': 4097}, seed 1: 3 of 4097 elements differ"}])


def test_the_kernel_breakdown_shares_launches_rates_and_occupancy():
    rows = {row["name"]: row for row in profiled_parent()["kernels"]}
    assert list(rows) == ["_fused_softmax_kernel", "_row_max_kernel", "_scale_kernel"]  # by device time
    fused = rows["_fused_softmax_kernel"]
    assert fused["share"] == pytest.approx(300 / 590) and fused["launches_per_call"] == 1
    assert fused["us_per_launch"] == pytest.approx(30.0)
    assert fused["bandwidth_fraction"] == pytest.approx(2 * MB32 / 30e-6 / BYTES_PER_S)
    assert rows["_row_max_kernel"]["launches_per_call"] == 2
    assert "flops_per_s" not in fused  # three kernels: the call's FLOPs are not split between them
    # 40 registers: 1280 per warp, 12 programs of 4 warps fit the register file: 48 of 64 warps
    assert fused["occupancy"] == 1.0 and rows["_row_max_kernel"]["occupancy"] == 0.75
    # 64 registers x 4 warps: 8192 per program, 8 programs of 4 warps = 32 of 64 warps
    assert occupancy(64, 4, 0, H100) == 0.5 and occupancy(None, 4, 0, H100) is None
    assert occupancy(32, 4, 100 * 1024, H100) == pytest.approx(8 / 64)  # two programs' shared memory
    lone = inspiration().result.extra["kernel_profile"]["kernels"][0]
    assert lone["flops_per_s"] == pytest.approx(5e7 / 50e-6) and lone["share"] == 1.0
    assert breakdown({}, 10, set(), {}, 0.0, None, None)["kernels"] == []
    # A compute-bound call's lone kernel is told its FLOP rate, a memory-bound one's its bandwidth.
    profile = inspiration().result.extra["kernel_profile"]
    assert "1 TFLOP/s (0.1% of peak FLOP rate)" in kernel_rows(gpu_result(0.05, profile, bound="compute"))["rows"][0]
    assert "1.34 TB/s over its tensor arguments' bytes" in kernel_rows(gpu_result(0.05, profile))["rows"][0]


def test_the_prompt_of_a_profiled_parent_is_the_golden_one():
    prompt = render("rewrite.jinja", context())
    if os.environ.get("EVO_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(prompt, encoding="utf-8")
    assert prompt == GOLDEN.read_text(encoding="utf-8")
    for text in ("time: 45.2 us; eager PyTorch 83.6 us; torch.compile 60.1 us",
                 "memory floor 20 us, compute floor 0.0505 us: memory-bound; 44.3% of it reached",
                 "`_fused_softmax_kernel`: 51% of device time; 1 launch per call, 30 us each; 2.24 TB/s",
                 "(67% of peak bandwidth); 32 registers, 0 spills, 8 warps, occupancy 100%",
                 "`_row_max_kernel`: 41% of device time; 2 launches per call, 12 us each",
                 "other device work: 1.7% (Memset (Device) 1.7%)", "incorrect (stage: shape sets)"):
        assert text in prompt, text


def test_a_cpu_result_says_nothing_it_did_not_measure():
    cpu = EvalResult(status=Status.CORRECT, speedup=1.2, runtime_ms=40.0, ref_runtime_ms=48.0,
                     device="cpu (Triton interpreter)")
    ctx = replace(context(), parent=program(1, cpu), inspirations=[])
    prompt = render("rewrite.jinja", ctx)
    assert "Triton's interpreter on the CPU: not a GPU's times" in prompt
    for absent in ("torch.compile 0", "floor", "device time", "occupancy", "roofline"):
        assert absent not in prompt, absent


def test_a_failed_child_shows_its_stage_and_the_first_lines_of_its_error():
    error = ("Traceback (most recent call last):\n  File \"harness.py\", line 1, in run\n    check()\n"
             "triton.compiler.errors.CompilationError: at 12:8:\n" + "".join(f"    line {i}\n" for i in range(30)))
    failed = EvalResult(status=Status.COMPILE_ERROR, reason="smoke test, shape default: CompilationError: at 12:8",
                        error=error, extra={"stage": "smoke test"})
    ctx = replace(context(), parent=program(3, failed), inspirations=[], repair=True)
    prompt = render("repair.jinja", ctx)
    assert "## What went wrong: compile_error (stage: smoke test)" in prompt
    assert "The error's first lines:\n```\ntriton.compiler.errors.CompilationError: at 12:8:\n    line 0\n" in prompt
    assert "    line 18\n... (11 more lines)\n```" in prompt and "line 19" not in prompt
    assert "File \"harness.py\"" not in prompt
    assert error_excerpt("no traceback\nsecond\nthird", 2) == "no traceback\nsecond\n... (1 more lines)"


def test_a_small_budget_trims_by_the_stated_rule_never_the_parents_figures():
    ctx = context()
    full = render("rewrite.jinja", ctx)
    assert full.count("- time:") == 2 and full.count("- where the device time goes") == 2
    # Just under the full prompt: the first step alone (the inspiration's kernel rows) makes it fit.
    first = _render("rewrite.jinja", ctx, replace(FULL, **TRIM_STEPS[0]), {})
    assert len(first) < len(full)
    fits = render("rewrite.jinja", ctx, budget_tokens=len(first) // 4 + 1)
    assert fits == first and fits.count("- where the device time goes") == 1 and fits.count("- time:") == 2
    # No budget can cut more than the rule: the parent keeps its time, baselines, floors and first kernel.
    least = render("rewrite.jinja", ctx, budget_tokens=1)
    assert least.count("- time:") == 1 and least.count("memory floor") == 1
    assert "eager PyTorch 83.6 us; torch.compile 60.1 us" in least
    assert "`_fused_softmax_kernel`" in least and "`_row_max_kernel`" not in least
    assert "2 more kernel(s) of the candidate: 47%" in least
    assert "measured speedup over the reference: 1.633x" in least  # the inspiration's speedup stays
    assert PARENT.strip() in least and TASK.strip() in least


def test_the_archive_keeps_floors_and_profile_for_the_next_prompt(tmp_path):
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    seed = archive.add_program(task="softmax", island=0, generation=0, operator="seed", source=PARENT)
    archive.record_evaluation(seed, gpu_result(0.0452, profiled_parent()))
    archive.close()
    stored = Archive(f"sqlite:///{tmp_path / 'archive.db'}").get(seed.id)  # read back from the database
    assert stored.result.extra["kernel_profile"] == profiled_parent()
    assert stored.result.extra["roofline"]["memory_ms"] == pytest.approx(roofline(0.0452)["memory_ms"])
    ctx = replace(context(), parent=stored, inspirations=[])
    assert "memory floor 20 us" in render("rewrite.jinja", ctx) and "`_scale_kernel`" in render("rewrite.jinja", ctx)


def test_a_run_stores_prompts_that_carry_the_parents_profile_floors_and_baselines(tmp_path, builtin_tasks):
    from tests.support.llm_server import ScriptedLLMServer, TrivialEvaluator, Variants
    from tests.test_llm_run import rows, run

    class Profiled(TrivialEvaluator):
        def score(self, task_name, task_source, source):
            plain = super().score(task_name, task_source, source)
            return gpu_result(0.0836 / plain.speedup, profiled_parent())

    with ScriptedLLMServer(Variants()) as server:
        archive, _ = run(tmp_path, [builtin_tasks["gelu"]], server, budget=4, per_island=1, prepared=1,
                         evaluator=Profiled())
    prompts = [c.prompt for c in rows(archive, LLMCallRow) if c.prompt]
    assert prompts
    for prompt in prompts:
        for text in ("eager PyTorch 83.6 us; torch.compile 60.1 us", "memory floor 20 us",
                     "where the device time goes (10 profiled calls", "`_fused_softmax_kernel`: 51% of device time"):
            assert text in prompt, text
    archive.close()
    reader = ArchiveReader(path=tmp_path / "archive.db")
    with archive.engine.connect() as c:
        made = [r.program_id for r in c.execute(select(LLMCallRow.program_id)) if r.program_id is not None]
    assert any("memory floor" in call["prompt"] for calls in reader.prompts(made).values() for call in calls)

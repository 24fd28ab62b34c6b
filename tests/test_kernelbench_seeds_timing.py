"""``experiments/kernelbench_seeds.py`` times a task's seeds as ``evo run`` starts from them: the
twin in split precision first where the derived seed holds GEMM templates, then the exact seed,
and the record keeps the fastest correct one.  A record timed with the exact seed alone (before
the twins were timed) is timed again."""
import json
from pathlib import Path

from evaluator import EvalResult, EvaluatorSettings, Status
from tests.support.modules import load_module

_PATH = Path(__file__).parents[1] / "experiments" / "kernelbench_seeds.py"
GEMM_SEED = ("K0_BLOCK_M = 128\nK0_BLOCK_N = 128\nK0_NUM_WARPS = 4\n"
             "acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)\n")
POINTWISE_SEED = "K0_XBLOCK = 1024\ntmp0 = tl.load(in_ptr0 + x0)\n"


def _module():
    return load_module(_PATH, "kernelbench_seeds_under_test", compiled=False, register=True)


class _Evaluator:
    """Split-precision kernels take 1 ms, exact ones 2 ms; torch.compile takes 1.5 ms."""

    slots = 1
    evaluated: list[str] = []

    def __init__(self, settings, device, index):
        self.settings = settings

    def evaluate(self, task, source, kernel):
        self.evaluated.append(kernel)
        runtime = 1.0 if "tf32x3" in kernel else 2.0
        return EvalResult(Status.CORRECT, speedup=4.0 / runtime, speedup_vs_compiled=1.5 / runtime,
                          runtime_ms=runtime, ref_runtime_ms=4.0, compiled_runtime_ms=1.5, wall_s=0.1)

    def close(self):
        pass


def test_a_gemm_seed_is_timed_with_its_twin_and_the_faster_one_is_the_record(tmp_path, monkeypatch):
    module = _module()
    monkeypatch.setattr(module, "Evaluator", _Evaluator)
    _Evaluator.evaluated = []
    rows = [{"name": "level2/1_Gemm", "level": "level2", "source": "", "footprint_gb": 0.0, "seed": GEMM_SEED},
            {"name": "level1/2_Relu", "level": "level1", "source": "", "footprint_gb": 0.0, "seed": POINTWISE_SEED},
            # timed before with the exact seed alone: timed again, twin included
            {"name": "level2/3_Gemm", "level": "level2", "source": "", "footprint_gb": 0.0, "seed": GEMM_SEED,
             "eval": {"status": "correct", "runtime_ms": 2.0}},
            # timed with both already: left as it is
            {"name": "level2/4_Gemm", "level": "level2", "source": "", "footprint_gb": 0.0, "seed": GEMM_SEED,
             "eval": {"status": "correct", "runtime_ms": 1.0, "kernels": 2}}]
    results = module.Results(tmp_path, rows, {})
    module.time_all(list(results.rows.values()), EvaluatorSettings(device="cuda"), float("inf"), results)

    assert len(_Evaluator.evaluated) == 5  # two tasks with a twin, one without; the fourth not again
    saved = {r["name"]: r["eval"] for r in json.loads((tmp_path / "kernelbench_seeds.json").read_text())["problems"]}
    gemm = saved["level2/1_Gemm"]
    assert gemm["runtime_ms"] == 1.0 and gemm["speedup_vs_compiled"] == 1.5 and gemm["kernels"] == 2
    assert [k["runtime_ms"] for k in gemm["per_kernel"]] == [1.0, 2.0]  # the twin first, as the run seeds it
    assert saved["level1/2_Relu"]["kernels"] == 1 and saved["level1/2_Relu"]["runtime_ms"] == 2.0
    assert saved["level2/3_Gemm"]["kernels"] == 2 and saved["level2/4_Gemm"] == rows[3]["eval"]


def test_problems_named_again_are_timed_again_whatever_their_record(tmp_path, monkeypatch):
    """``--again``: a seed whose starting kernels or whose checks changed since its record."""
    module = _module()
    monkeypatch.setattr(module, "Evaluator", _Evaluator)
    _Evaluator.evaluated = []
    timed = {"status": "incorrect", "runtime_ms": None, "kernels": 2}
    rows = [{"name": f"level1/{i}_Gemm", "level": "level1", "source": "", "footprint_gb": 0.0, "seed": GEMM_SEED,
             "eval": dict(timed)} for i in (6, 7)]
    results = module.Results(tmp_path, rows, {})
    module.time_all(list(results.rows.values()), EvaluatorSettings(device="cuda"), float("inf"), results,
                    again="^level1/6_")
    assert len(_Evaluator.evaluated) == 2  # level1/6's twin and seed; level1/7 left as it was
    saved = {r["name"]: r["eval"] for r in json.loads((tmp_path / "kernelbench_seeds.json").read_text())["problems"]}
    assert saved["level1/6_Gemm"]["status"] == "correct" and saved["level1/7_Gemm"] == timed


def test_the_record_is_the_first_kernel_where_none_is_correct():
    module = _module()
    failed = [{"status": "incorrect", "runtime_ms": None, "reason": "max abs error 3"},
              {"status": "error", "runtime_ms": None, "reason": "compile"}]
    best = module.best_of(failed)
    assert best["status"] == "incorrect" and best["kernels"] == 2 and best["reason"] == "max abs error 3"

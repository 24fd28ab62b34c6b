"""``experiments/kernelbench_search.py collect`` on archives the engine writes: the best kernel of
each task, and a record merged from two runs, a later run's tasks replacing the earlier's."""
import json
from argparse import Namespace
from pathlib import Path

from archive import Archive
from evaluator import EvalResult, Status
from tests.support.modules import load_module

_PATH = Path(__file__).parents[1] / "experiments" / "kernelbench_search.py"


def _module():
    return load_module(_PATH, "kernelbench_search_under_test", compiled=False, register=True)


def _run(folder: Path, results: dict[str, list[float]]) -> Path:
    """A run directory whose archive holds, per task, a seed and children at these speedups over
    eager (torch.compile at half eager's time)."""
    folder.mkdir()
    archive = Archive(f"sqlite:///{folder / 'archive.db'}")
    for task, speedups in results.items():
        parent = None
        for generation, speedup in enumerate(speedups):
            program = archive.add_program(task=task, island=0, generation=generation,
                                          operator="seed" if generation == 0 else "sweep",
                                          source=f"BLOCK_SIZE = {generation}\n# {task}\n",
                                          parent_ids=(parent.id,) if parent else ())
            archive.record_evaluation(program, EvalResult(
                status=Status.CORRECT, speedup=speedup, runtime_ms=10.0 / speedup, ref_runtime_ms=10.0,
                compiled_runtime_ms=5.0, speedup_vs_compiled=0.5 * speedup, device="GPU"))
            parent = program
    archive.close()
    return folder


def test_collect_merges_runs_the_later_run_winning_its_tasks(tmp_path):
    kb = _module()
    first = _run(tmp_path / "first", {"l1_1_Tanh": [1.0, 2.0], "l1_2_conv_standard_2D": [0.5, 1.0]})
    again = _run(tmp_path / "again", {"l1_2_conv_standard_2D": [0.5, 4.0, 3.0]})
    out = tmp_path / "out"
    kb.collect(Namespace(run=[f"strict={first}+{again}", f"first={first}"], baselines=None, out=str(out)))
    data = json.loads((out / "kernelbench_search.json").read_text())
    merged, alone = data["problems"]["strict"], data["problems"]["first"]
    assert merged["l1_1_Tanh"]["best"]["speedup"] == 2.0 and merged["l1_1_Tanh"]["run"] == str(first)
    conv = merged["l1_2_conv_standard_2D"]
    assert conv["run"] == str(again) and conv["best"]["speedup"] == 4.0 and conv["children"] == 2
    assert alone["l1_2_conv_standard_2D"]["best"]["speedup"] == 1.0
    # geomean over torch.compile: (1.0 * 2.0) ** 0.5 merged, (1.0 * 0.5) ** 0.5 from the first run alone
    assert abs(data["summary"]["strict"]["geomean_vs_compile"] - 2 ** 0.5) < 1e-9
    assert abs(data["summary"]["first"]["geomean_vs_compile"] - 0.5 ** 0.5) < 1e-9
    assert data["summary"]["strict"]["families"]["convolution"]["problems"] == 1
    assert "| l1_2_conv_standard_2D |" in (out / "kernelbench_search.md").read_text()


def test_collect_says_the_speed_over_max_autotune_from_the_baselines(tmp_path):
    kb = _module()
    run = _run(tmp_path / "run", {"l1_1_Tanh": [1.0, 2.0], "l1_2_conv_standard_2D": [0.5, 1.0]})
    # max-autotune at 0.8x compile's time for Tanh; the convolution's max-autotune timed out
    baselines = tmp_path / "baselines.json"
    baselines.write_text(json.dumps({"l1_1_Tanh": {"eager_ms": 10.0, "compile_ms": 5.0, "max_autotune_ms": 4.0},
                                     "l1_2_conv_standard_2D": {"eager_ms": 10.0, "compile_ms": 5.0}}))
    kb.collect(Namespace(run=[f"strict={run}"], baselines=str(baselines), out=str(tmp_path / "out")))
    summary = json.loads((tmp_path / "out" / "kernelbench_search.json").read_text())["summary"]["strict"]
    # Tanh's best: 1.0x compile, so 0.8x max-autotune (its time 5 ms against max-autotune's 4 ms)
    assert summary["max_autotune_problems"] == 1 and abs(summary["geomean_vs_max_autotune"] - 0.8) < 1e-9

"""experiments/llm_kernelbench.py: a model measured on a KernelBench folder, end to end against the scripted
OpenAI-compatible server (which measures the plumbing, not a model), and the pieces it is made of."""
import json
import socket

import pytest

from evo.views.fast_p import fast_p_rows
from experiments import llm_kernelbench as bench
from tests.support.llm_server import ScriptedLLMServer
from tests.support.scale_writer import scale_writer

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * SCALE


def get_inputs():
    return [torch.randn(1000)]


def get_init_inputs():
    return []
'''



def kernelbench_folder(tmp_path):
    root = tmp_path / "KernelBench"
    for level, name, scale in (("level1", "1_Triple", "3.0"), ("level2", "7_Quintuple", "5.0")):
        (root / level).mkdir(parents=True)
        (root / level / f"{name}.py").write_text(PROBLEM.replace("SCALE", scale))
    (root / "level1" / "3_Broken.py").write_text(PROBLEM.replace("x * SCALE", "x.no_such_method()"))
    (root / "level1" / "notes.py").write_text("x = 1\n")  # not a problem file
    return root


@pytest.mark.slow
def test_a_model_is_scored_per_problem_and_per_level_with_tokens_dollars_the_command_and_the_warning(
        tmp_path, capsys):
    root, out = kernelbench_folder(tmp_path), tmp_path / "out"
    with ScriptedLLMServer(scale_writer) as server:
        args = [str(root), "--model", "openai/scripted", "--api-base", server.api_base, "--calls-per-problem", "3",
                "--device", "cpu", "--out", str(out), "--scripted", "--",
                "run.backend=local", "islands.count=1", "llm.retries=0", "evaluator.timeout_s=60",
                # torch.compile's eager backend: a baseline the CPU times in a moment
                "evaluator.compile_baseline=true", "evaluator.compile_backend=eager",
                "llm.prices={openai/scripted: [1000.0, 2000.0]}"]
        assert bench.main(args) == 0
        printed = capsys.readouterr().out
        result = json.loads((out / "results.json").read_text())
        requests = len(server.requests)
        assert bench.main(args) == 0  # again: every problem is kept from its record, none run again
        again = capsys.readouterr().out
        assert len(server.requests) == requests and again.count("done before, kept") == 3
        assert json.loads((out / "results.json").read_text())["problems"] == result["problems"]
        with pytest.raises(SystemExit, match="another search"):  # another budget never mixes with these records
            bench.main([a if a != "3" else "4" for a in args])  # --calls-per-problem 4
    assert "plumbing, not a model" in printed and result["warnings"][0] == bench.SCRIPTED_WARNING
    assert "plumbing, not a model" in (out / "results.md").read_text()
    assert result["command"].startswith("python experiments/llm_kernelbench.py ") and "--calls-per-problem 3" in \
        result["command"]
    assert result["model"] == "openai/scripted" and result["calls_per_problem"] == 3
    assert result["tolerance"] == ["kernelbench"], "KernelBench's tolerances, as its published fast_p"
    assert "llm.budget.calls=3" in result["evo_run_overrides"] and "operators.constants.weight=0" in \
        result["evo_run_overrides"]
    assert result["engine"] and result["engine"][0].startswith("0.1.0") and result["devices"] and result["date"]

    triple, broken, quintuple = result["problems"]
    assert triple["problem"] == "level1/1_Triple" and triple["correct"] and triple["exit"] == 0
    assert broken["problem"] == "level1/3_Broken" and not broken["correct"] and broken["llm_calls"] == 0
    assert "no_such_method" in broken["set_aside"], "its reference fails: set aside before any search"
    assert triple["speedup"] > 0 and triple["speedup_vs_compiled"] > 0
    assert quintuple["problem"] == "level2/7_Quintuple" and not quintuple["correct"] and quintuple["set_aside"]
    for row in (triple, quintuple):
        assert 1 <= row["llm_calls"] <= 3 and row["prompt_tokens"] == 100 * row["llm_calls"]
        assert row["completion_tokens"] == 50 * row["llm_calls"]
        assert row["usd"] == pytest.approx(row["llm_calls"] * (0.1 + 0.1))
        assert row["command"].startswith("evo run run.dir=")
    assert requests <= 3 * (3 + 1), "three calls a problem, and the start-up checks"

    groups = {g["group"]: g for g in result["groups"]}
    assert set(groups) == {"level1", "level2", "all"}
    whole = groups["all"]
    assert whole["tasks"] == 3 and whole["fast_p"]["0.0"] == whole["fast_p_compiled"]["0.0"] == pytest.approx(1 / 3)
    assert groups["level1"]["tasks"] == 2 and groups["level1"]["fast_p"]["0.0"] == 0.5
    assert set(whole["fast_p"]) == set(whole["fast_p_compiled"]) >= {"0.0", "1.0", "2.0"}
    assert whole["geomean"] == pytest.approx(triple["speedup"]) and whole["geomean_n"] == 1
    assert whole["geomean_all"] == pytest.approx(triple["speedup"] ** (1 / 3))
    calls = triple["llm_calls"] + quintuple["llm_calls"]
    assert result["totals"]["llm_calls"] == calls and result["totals"]["usd"] == pytest.approx(0.2 * calls)
    assert result["totals"]["usd_per_problem"] == pytest.approx(0.2 * calls / 3)
    assert "fast_1 eager" in printed and "fast_2 compile" in printed and "level2/7_Quintuple" in printed


def test_problem_files_are_the_levels_problems_in_order_picked_by_pattern_and_limit(tmp_path):
    root = tmp_path / "kb"
    for level, names in (("level1", ["10_b", "2_a", "1_c"]), ("level2", ["1_d"])):
        (root / level).mkdir(parents=True)
        for name in names:
            (root / level / f"{name}.py").write_text(PROBLEM)
    (root / "level1" / "__init__.py").write_text("")
    (root / "src").mkdir()
    (root / "src" / "example.py").write_text(PROBLEM)  # outside the levels: not a problem of the benchmark
    names = lambda files: [f"{f.parent.name}/{f.stem}" for f in files]  # noqa: E731
    assert names(bench.problem_files(root, [], None)) == ["level1/1_c", "level1/2_a", "level1/10_b", "level2/1_d"]
    assert names(bench.problem_files(root, ["level2/*", "2_*"], None)) == ["level1/2_a", "level2/1_d"]
    assert names(bench.problem_files(root, [], 2)) == ["level1/1_c", "level1/2_a"]
    assert names(bench.problem_files(root / "level2", [], None)) == ["level2/1_d"]
    assert names(bench.problem_files(tmp_path, ["level1/1*"], None)) == ["level1/1_c", "level1/10_b"], \
        "levels below the folder given (KernelBench's repository)"


@pytest.mark.slow
def test_an_endpoint_that_cannot_be_used_stops_the_benchmark_before_any_problem_is_scored(tmp_path):
    root, out = kernelbench_folder(tmp_path), tmp_path / "out"
    with socket.socket() as held:  # bound, never listening, for the whole test: nothing answers there
        held.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{held.getsockname()[1]}/v1"
        with pytest.raises(SystemExit, match="failed before its search started: LLM model openai/scripted"):
            bench.main([str(root), "--model", "openai/scripted", "--api-base", closed, "--device", "cpu",
                        "--out", str(out), "--", "run.backend=local", "llm.retries=0"])
    assert not (out / "problems").exists() and not (out / "results.json").exists()


def test_a_local_endpoint_is_warned_about_and_the_model_reaches_evo_run_quoted_where_needed():
    args = bench.parse(["kb", "--model", "openai/my model", "--api-base", "http://localhost:8000/v1",
                        "--", "islands.count=1"])
    (warning,) = bench.warnings_for(args)
    assert "is on this machine" in warning and "plumbing, not a model" in warning
    keys = bench.run_overrides(args, ["operators.constants.weight=0"])
    assert "llm.model='openai/my model'" in keys and keys[-1] == "islands.count=1"
    assert "run.compile_seeds=false" in keys and "operators.constants.weight=0" in keys
    hosted = bench.parse(["kb", "--model", "anthropic/claude-x", "--api-key-env", "MY_KEY", "--offline"])
    assert bench.warnings_for(hosted) == [] and "llm.api_key_env=MY_KEY" in bench.run_overrides(hosted, ["x"])
    assert "x" not in bench.run_overrides(hosted, ["x"]), "--offline keeps the offline operators"


def test_fast_p_over_torch_compile_and_the_geomean_over_every_problem():
    bests = [dict(task="a", group="level1", set_aside=False, speedup=2.5, speedup_vs_compiled=1.2),
             dict(task="b", group="level1", set_aside=False, speedup=1.2, speedup_vs_compiled=0.8),
             dict(task="d", group="level1", set_aside=True, speedup=None, speedup_vs_compiled=None)]
    (row,) = fast_p_rows(bests)
    assert row["fast_p_compiled"] == {0.0: pytest.approx(2 / 3), 1.0: pytest.approx(1 / 3), 1.5: 0.0, 2.0: 0.0}
    assert row["geomean_all"] == pytest.approx((2.5 * 1.2 * 1.0) ** (1 / 3))
    assert row["geomean_compiled_all"] == pytest.approx((1.2 * 0.8 * 1.0) ** (1 / 3))
    untimed = [dict(b, speedup_vs_compiled=None) for b in bests]
    assert fast_p_rows(untimed)[0]["fast_p_compiled"] is None, "no kernel timed against torch.compile (a CPU run)"

"""The pipeline benchmark (experiments/pipeline_bench.py): its arithmetic, and a tiny CPU run."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.pipeline_figures import TimedBackend, figures, ratios, table

ROOT = Path(__file__).resolve().parent.parent


class _TwoSlots:
    island_count, slot_count = 1, 2


def _record(worker, start, end, wall_s, child=True):
    return {"worker": worker, "task": "t", "start": start, "end": end, "child": child, "wall_s": wall_s,
            "status": "correct"}


def test_figures_from_known_intervals():
    backend = TimedBackend(_TwoSlots(), seeds=set())
    backend.evaluations = [_record(0, 0.0, 2.0, 1.0, child=False), _record(0, 2.0, 6.0, 3.0),
                           _record(1, 3.0, 5.0, 2.0), _record(1, 7.0, 10.0, 3.0)]
    backend.proposals = [{"island": 0, "start": 0.0, "end": 4.0, "child": True, "llm_latency_s": [3.0]},
                         {"island": 0, "start": 1.0, "end": 3.0, "child": True, "llm_latency_s": [1.0]}]
    samples = [{"proposals": 2, "llm_requests": 1, "queued": 3}, {"proposals": 0, "llm_requests": 0, "queued": 1}]
    f = figures(backend, samples, (0.0, 10.0), {"driver": 0.3})
    assert (f["children"], f["seeds"], f["child_window_s"]) == (3, 1, 8.0)  # children from 2.0 to 10.0
    worker0, worker1 = f["busy_child_window"]
    assert worker0["handed_over"] == pytest.approx(4 / 8) and worker0["sandbox"] == pytest.approx(3 / 8)
    assert worker1["handed_over"] == pytest.approx(5 / 8) and worker1["sandbox"] == pytest.approx(5 / 8)
    assert f["children_per_hour"]["steady"] == pytest.approx(3600 * 2 / (10.0 - 5.0))  # ends 5, 6, 10
    assert f["children_per_hour"]["run"] == pytest.approx(3600 * 3 / 10)
    assert f["proposals_in_flight_mean"] == pytest.approx(0.6) and f["llm"]["in_flight_mean"] == pytest.approx(0.4)
    assert f["queued_max_sampled"] == 3 and f["cpu_ms_per_child"]["driver"] == pytest.approx(100)
    one = figures(backend, samples, (0.0, 20.0), {"driver": 0.3})
    results = [{"islands": 4, "evaluators": 2, "proposals_per_island": 4, "figures": f},
               {"islands": 4, "evaluators": 1, "proposals_per_island": 4, "figures": one}]
    assert ratios(results)[0]["run"] == pytest.approx(2.0)
    assert "at 4 islands" in table(results)


@pytest.mark.slow
def test_tiny_cpu_run_writes_sane_figures(tmp_path):
    """1 island, 1 evaluator (Triton's interpreter), 2 children, LLM latency 0.05 s, local backend."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "experiments.pipeline_bench", "--device", "cpu", "--backend",
                           "local", "--configs", "1x1", "--tasks", "gelu", "--evaluations", "2", "--latency",
                           "0.05", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((out / "pipeline_bench.json").read_text())
    assert data["device"] == "cpu" and data["latency_s"] == 0.05
    (entry,) = data["configurations"]
    f = entry["figures"]
    assert (f["children"], f["seeds"], f["correct_children"]) == (2, 1, 2)
    assert len(f["evaluation_records"]) == 3 and f["proposals_with_child"] == 2
    (busy,) = f["busy_child_window"]
    assert busy["evaluations"] == 2 and 0 < busy["sandbox"] <= busy["handed_over"] <= 1
    assert all(rate > 0 for rate in f["children_per_hour"].values())
    assert f["llm"]["requests"] == f["proposals"] and f["llm"]["mean_latency_s"] >= 0.05
    assert 0 < f["run_s"] and f["cpu_ms_per_child"]["driver"] > 0
    assert "| 1 | 1 | 4 | 2 (2) |" in (out / "pipeline_bench.md").read_text()

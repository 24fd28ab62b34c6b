"""One end-to-end search with Ray actors and the loopback LLM server.

Which children a short run ends with depends on which proposals come back first; what it asserts
holds whatever the order: the LLM operator is the only one drawn, and every reply is a new kernel.
"""
import json
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text

from tests.support.llm_server import ScriptedLLMServer, Variants


@pytest.mark.slow
def test_search_with_ray_islands_and_an_llm_operator(tmp_path):
    run_dir = tmp_path / "run"
    with ScriptedLLMServer(Variants()) as server:
        out = subprocess.run(
            [sys.executable, "-m", "evo.cli", "run", f"run.dir={run_dir}", "task=quick",
             "run.budget.evaluations=8", "evaluator.device=cpu", "islands.count=2",
             "islands.migration.interval=4", "llm.model=openai/scripted", f"llm.api_base={server.api_base}",
             "operators.constants.weight=0", "operators.param_crossover.weight=0", "operators.dot_precision.weight=0", "operators.load_hints.weight=0", "operators.split_k.weight=0", "operators.persistent_tiles.weight=0", "operators.persistent_reduction.weight=0", "operators.split_reduction.weight=0", "operators.fuse_epilogue.weight=0",
             "operators.sweep.operator.max_children=0", "operators.llm_diff.weight=0",
             "operators.llm_crossover.weight=0", "operators.llm_rewrite.weight=1", "run.progress=false",
             "novelty.enabled=false"],  # each Variants reply adds one unused constant: a near-duplicate
            capture_output=True, text=True, timeout=600)
        requests = len(server.requests)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "LLM:" in out.stdout and requests >= 2  # the start-up check and at least one rewrite
    db = create_engine(f"sqlite:///{run_dir / 'archive.db'}")
    with db.connect() as c:
        operators = dict(c.execute(text("select operator, count(*) from programs group by operator")).all())
        islands = {row[0] for row in c.execute(text("select island from programs where operator != 'seed'"))}
        calls = c.execute(text("select count(*), sum(error = '') from llm_calls")).one()
        migrations = c.execute(text("select count(*) from migrations")).scalar()
        children = c.execute(text(
            "select count(*) from evaluations e join programs p on p.id = e.program_id "
            "where p.operator != 'seed'")).scalar()
    assert children == 8 and operators["seed"] == 2
    # Every proposal is a rewrite (a repair only follows a failed child) and every reply is a new kernel.
    assert operators.get("llm_rewrite", 0) >= 1 and set(operators) <= {"seed", "llm_rewrite", "llm_repair"}
    assert islands == {0, 1}
    assert calls[0] >= 1 and calls[1] == calls[0]
    assert migrations >= 1
    events = [json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert events.count("evaluated") == 10

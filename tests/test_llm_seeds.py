"""Seeds from an LLM: a task without a seed kernel starts from kernels an LLM writes from its reference,
evaluated and repaired like any child; one whose attempts all fail is set aside and the others go on."""
import json
import sqlite3
from collections import Counter

import numpy as np
import pytest
from rich.console import Console

from evo.core.program import Program
from evo.loop.seeding import Seeding
from evo.loop.startup import prepare_tasks
from evo.core.task import Task
from islands import Island
from operators import Context, LLMClient, LLMSeed, TunableConstantMutation
from operators.llm import SEED_STRATEGIES
from tests.support.llm_server import ScriptedLLMServer, completion
from tests.support.scale_writer import KERNEL, scale_writer
from tests.support import StandInBackend, StandInEvaluator
from tests.test_cli import LOCAL, evo

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x * SCALE


def get_inputs():
    return [torch.randn(1000)]


def get_init_inputs():
    return []
'''



def test_seed_prompts_carry_the_reference_and_a_strategy_per_attempt():
    task = Task(name="triple", path="/x/triple.py", source=PROBLEM.replace("SCALE", "3.0"))
    with ScriptedLLMServer(scale_writer) as server:
        client = LLMClient(model="openai/scripted", api_base=server.api_base, timeout_s=10, retries=0)
        seeder = LLMSeed(client=client, temperature=1.3)
        island = Island(0, [TunableConstantMutation(), seeder], [1.0, 0.0], seed=1)
        proposals = [island.propose(Context(task_name=task.name, task_source=task.source, parent=None,
                                            attempt=n, sequence=n)) for n in range(2)]
        parent = Program(id=1, task=task.name, island=0, generation=0, operator="seed", source=KERNEL)
        refused = seeder.propose(Context(task_name=task.name, task_source=task.source, parent=parent),
                                 np.random.default_rng(0))
    assert [p.operator for p in proposals] == ["llm_seed", "llm_seed"] and all(p.source for p in proposals)
    prompts = [r["messages"][-1]["content"] for r in server.requests]
    assert all("return x * 3.0" in p and "class ModelNew(nn.Module)" in p for p in prompts)
    assert SEED_STRATEGIES[0] in prompts[0] and SEED_STRATEGIES[1] in prompts[1]
    assert all(r["temperature"] == 1.3 for r in server.requests)
    assert refused.source is None and "no parent" in refused.note


def test_seeding_asks_a_wave_at_a_time_and_counts_attempts_across_resumes():
    seeding = Seeding(at_once=2, attempts=3)
    assert seeding.next_task(["a", "b"], Counter(), Counter()) == "a"
    assert seeding.next_task(["a", "b"], Counter(a=1), Counter()) == "b"  # the fewest under way first
    assert seeding.next_task(["a"], Counter(a=1), Counter(a=1)) is None  # a wave of two is under way
    for _ in range(3):
        seeding.attempted("a")
    assert seeding.exhausted("a") and seeding.next_task(["a"], Counter(), Counter()) is None
    resumed = Seeding(at_once=2, attempts=3)
    resumed.restore(seeding.meta()["seeding.attempts"])
    assert resumed.exhausted("a") and not resumed.exhausted("b")
    assert "after 3 LLM attempts (run.llm_seed_attempts=3); the last: incorrect" in resumed.reason("a", "incorrect")


def test_without_an_llm_a_seedless_task_is_set_aside_naming_both_ways_out():
    task = Task(name="triple", path="/x/triple.py", source=PROBLEM)

    class Backend(StandInBackend):  # every reference accepted, no seed derived

        pass

    prepared = prepare_tasks([task], Backend(), on_gpu=False, compile_seeds=True, llm=False, earlier={},
                             has_programs=set(), console=Console(quiet=True))
    (aside,) = prepared.set_aside
    assert aside.stage == "seed" and "on a GPU, torch.compile derives one" in aside.reason
    assert "seeds/triple.py" in aside.reason and "llm.model" in aside.reason
    assert prepare_tasks([task], Backend(), on_gpu=False, compile_seeds=True, llm=True, earlier={},
                         has_programs=set(), console=Console(quiet=True)).tasks == [task]


def folder_of(tmp_path, **scales):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name, scale in scales.items():
        (tasks / f"{name}.py").write_text(PROBLEM.replace("SCALE", scale))
    return tasks


def llm_run(tmp_path, tasks, server, device="cpu"):
    run_dir = tmp_path / "run"
    where = [a for a in LOCAL if not a.startswith("evaluator.device=")] + [f"evaluator.device={device}"]
    out = evo("run", f"run.dir={run_dir}", f"task.path={tasks}", "llm.model=openai/scripted",
              f"llm.api_base={server.api_base}", "llm.retries=0", "islands.count=1", "run.budget.evaluations=2",
              "run.llm_seeds=2", "run.llm_seed_attempts=3", "evaluator.timeout_s=60", "run.compile_seeds=false",
              *where, timeout=600)
    return run_dir, out


def programs(run_dir) -> list[tuple]:
    with sqlite3.connect(run_dir / "archive.db") as c:
        return c.execute("select p.id, p.task, p.operator, e.status, (select count(*) from lineage l where "
                         "l.child_id = p.id and l.role = 'parent') from programs p left join evaluations e "
                         "on e.program_id = p.id order by p.id").fetchall()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.slow
def test_the_llm_seeds_a_seedless_task_which_is_then_searched_and_a_hopeless_one_is_set_aside(tmp_path, device):
    tasks = folder_of(tmp_path, triple="3.0", hopeless="5.0")
    with ScriptedLLMServer(scale_writer) as server:
        run_dir, out = llm_run(tmp_path, tasks, server, device)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = programs(run_dir)
    seeds = [r for r in rows if r[1] == "triple" and r[2] == "llm_seed"]
    assert seeds and all(r[4] == 0 for r in seeds)  # no parent
    assert any(r[3] == "correct" for r in seeds)
    children = [r for r in rows if r[1] == "triple" and r[2] not in ("llm_seed", "llm_repair")]
    assert children and all(r[4] >= 1 for r in children)  # searched from its seeds
    hopeless = [r for r in rows if r[1] == "hopeless"]
    assert all(r[3] != "correct" for r in hopeless) and any(r[2] == "llm_seed" for r in hopeless)
    with sqlite3.connect(run_dir / "archive.db") as c:
        stage, reason = c.execute("select stage, reason from set_aside where task = 'hopeless'").fetchone()
        attempts = json.loads(c.execute("select value from meta where key = 'seeding.attempts'").fetchone()[0])
    assert stage == "seed_evaluation" and "no correct kernel after 3 LLM attempts" in reason
    assert attempts["hopeless"] == 3
    assert "task hopeless set aside" in " ".join(out.stdout.split())
    status = evo("status", f"run.dir={run_dir}")
    assert status.returncode == 0 and "llm_seed" in status.stdout


@pytest.mark.slow
def test_a_run_whose_only_task_the_llm_cannot_seed_exits_non_zero(tmp_path):
    tasks = folder_of(tmp_path, hopeless="5.0")
    with ScriptedLLMServer(scale_writer) as server:
        run_dir, out = llm_run(tmp_path, tasks, server)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "every task was set aside" in out.stderr
    assert sum(r[2] == "llm_seed" for r in programs(run_dir)) >= 1


class Writer:
    """A scripted LLM whose every kernel differs (a ``VARIANT_n`` constant); those for x * 5.0, and
    their repairs, are marked WRONG."""

    def __init__(self):
        self.count = 0

    def __call__(self, request: dict):
        prompt = request["messages"][-1]["content"]
        if "## Current kernel" not in prompt and "No kernel exists yet" not in prompt \
                and "failed its evaluation" not in prompt:
            return 200, completion("OK")
        self.count += 1
        wrong = "WRONG = 1\n" if "x * 5.0" in prompt else ""
        return 200, completion(f"```python\nVARIANT_{self.count} = {self.count}\n{wrong}{KERNEL}```")


class MarkedEvaluator(StandInEvaluator):
    """Instant: a program marked WRONG is incorrect, any other correct."""

    def score(self, task_name: str, task_source: str, source: str):
        from evaluator.result import EvalResult, Status

        if "WRONG = 1" in source:
            return EvalResult(status=Status.INCORRECT, reason="wrong values", device="fake")
        return EvalResult(status=Status.CORRECT, speedup=1.0 + len(source) % 7 / 10, device="fake")


def test_attempts_are_counted_in_the_archive_and_a_resume_goes_on_from_them(tmp_path):
    from archive import Archive
    from evo.loop.controller import Controller
    from evo.loop.run_settings import RunSettings
    from islands import LocalBackend, MigrationSettings
    from operators import LLMMutation, LLMRepair, LLMSteering

    tasks = [Task(name=name, path=f"/x/{name}.py", source=PROBLEM.replace("SCALE", scale))
             for name, scale in (("triple", "3.0"), ("hopeless", "5.0"))]

    def run(server, tasks, attempts, resume_count):
        client = LLMClient(model="openai/scripted", api_base=server.api_base, timeout_s=10, retries=0)
        operators = [LLMMutation(client=client), LLMRepair(client=client, probability=1.0), LLMSeed(client=client)]
        islands = [Island(i, operators, [1.0, 0.0, 0.0], seed=3, requests=2) for i in range(2)]
        backend = LocalBackend(islands, lambda i: MarkedEvaluator(), 1, 3)
        archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
        controller = Controller(settings=RunSettings(dir=str(tmp_path), seed=3, budget_evaluations=40,
                                                     proposals_per_island=2),
                                tasks=tasks, archive=archive, backend=backend, migration=MigrationSettings(),
                                resume_count=resume_count, seeding=Seeding(at_once=1, attempts=attempts),
                                steering=LLMSteering(models=["openai/scripted"], repair_probability=1.0,
                                                     offline_operators=False))
        try:
            controller.run()
        finally:
            backend.close()
        return archive

    with ScriptedLLMServer(Writer()) as server:
        archive = run(server, tasks, attempts=5, resume_count=0)  # seeds, and repairs of the failed ones
        assert json.loads(archive.get_meta("seeding.attempts"))["hopeless"] == 5
        aside = archive.set_aside_tasks()
        assert set(aside) == {"hopeless"} and "after 5 LLM attempts" in aside["hopeless"]["reason"]
        assert archive.child_evaluation_count() == 40  # triple searched from its LLM seed
        assert archive.has_elites("triple") and not archive.has_elites("hopeless")
        seed_prompts = [r["messages"][-1]["content"] for r in server.requests
                        if "No kernel exists yet" in r["messages"][-1]["content"]]
        # A later seed prompt shows what the earlier attempts came to, on whichever island.
        assert any("x * 5.0" in p and "incorrect: wrong values" in p for p in seed_prompts)
        with sqlite3.connect(tmp_path / "archive.db") as c:
            made = [op for (op,) in c.execute("select operator from programs where task = 'hopeless'")]
        assert len(made) == 5 and "llm_repair" in made and made.count("llm_seed") >= 2  # failed seeds repaired
        archive.close()
        before = len(server.requests)
        archive = run(server, tasks[1:], attempts=7, resume_count=1)  # more attempts allowed on resume
        assert json.loads(archive.get_meta("seeding.attempts"))["hopeless"] == 7
        assert len(server.requests) - before == 2
        archive.close()

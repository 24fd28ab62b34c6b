"""Whole runs with LLM operators against scripted servers: faults, budgets, repairs, the bandit.

The evaluator is a trivial stand-in (tests.support.llm_server.TrivialEvaluator), so these
runs exercise the proposal path and the run loop, not Triton.  The fault and key tests run on
both transports (litellm, plain HTTP); the others on the default (plain HTTP for these endpoints).
"""
import json

import pytest
from sqlalchemy import select

from archive import Archive
from archive.models import LLMCallRow, ProgramRow
from evo.loop.controller import Controller
from evo.loop.run_settings import RunSettings
from evo.views.progress import RunEvents
from islands import Island, LocalBackend, MigrationSettings
from operators import (LLMBudget, LLMClient, LLMCrossover, LLMDiff, LLMMutation, LLMRepair, LLMSteering,
                       TunableConstantMutation)
from tests.support.llm_server import Faults, ScriptedLLMServer, TrivialEvaluator, Variants


def run(tmp_path, tasks, server, *, budget, models=("openai/scripted",), llm_budget=None, repair=0.0,
        offline=False, failing=False, per_island=4, prepared=2, crossover_only=False, prompts=None, evaluator=None,
        per_task=None, **client_kw):
    # A good reply comes back well inside timeout_s on a loaded machine; the faults' hang lasts longer.
    client = LLMClient(model=list(models), api_base=server.api_base, timeout_s=3, retries=1, backoff_s=0.01,
                       **client_kw)
    operators, weights = [LLMDiff(client=client), LLMMutation(client=client), LLMCrossover(client=client)], [1, 1, 1]
    if crossover_only:
        operators, weights = [LLMCrossover(client=client)], [3]
    if offline:
        operators.append(TunableConstantMutation()), weights.append(1.0)
    if repair:
        operators.append(LLMRepair(client=client, probability=repair)), weights.append(0.0)
    islands = [Island(i, operators, weights, seed=5, requests=per_island) for i in range(2)]
    backend = LocalBackend(islands, lambda i: evaluator or TrivialEvaluator(failing), 1, per_island + prepared)
    steering = LLMSteering(models=list(models), budget=llm_budget, repair_probability=repair,
                           offline_operators=offline, prompts=prompts)
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    events = RunEvents(tmp_path, budget, show=False)
    controller = Controller(settings=RunSettings(dir=str(tmp_path), seed=5, budget_evaluations=budget,
                                                 budget_per_task=per_task, proposals_per_island=per_island,
                                                 prepared_per_island=prepared),
                            tasks=tasks, archive=archive, backend=backend,
                            migration=MigrationSettings(interval=8), events=events, steering=steering)
    try:
        controller.run()
    finally:
        backend.close()
        events.close()
    return archive, controller


def rows(archive, table):
    with archive.engine.connect() as c:
        return c.execute(select(table.__table__)).all()


def event_kinds(tmp_path):
    return [json.loads(line)["event"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("transport", ["litellm", "http"])
@pytest.mark.slow
def test_a_run_through_every_fault_completes_its_budget_and_records_every_failure(tmp_path, builtin_tasks,
                                                                                   transport):
    plan = ["ok", "429", "ok", "500", "ok", "hang", "ok", "malformed", "truncated", "ok", "empty", "non_utf8"]
    faults = Faults(plan, hang_s=4)
    tasks = [builtin_tasks["gelu"], builtin_tasks["softmax"]]
    with ScriptedLLMServer(faults) as server:
        archive, controller = run(tmp_path, tasks, server, budget=24, models=("openai/a", "openai/b"),
                                  transport=transport)
    assert archive.child_evaluation_count() == 24 and archive.pending() == []
    calls = rows(archive, LLMCallRow)
    assert len(calls) == faults.requests, "every request is one llm_calls row"
    errors = [c.error for c in calls if c.error]
    assert len(errors) == sum(faults.injected.values())
    for kind, marker in [("429", "RateLimitError"), ("500", "internal error"), ("hang", "imeout"),
                         ("malformed", "Expecting value"), ("truncated", "truncated"), ("empty", "empty completion"),
                         ("non_utf8", "can't decode")]:
        assert sum(marker in e for e in errors) == faults.injected[kind], kind
    assert {c.model for c in calls} == {"openai/a", "openai/b"}
    assert all(c.prompt for c in calls) and all(c.task in ("gelu", "softmax") for c in calls)
    stats = controller.steering.ensemble.stats
    # Every LLM child is fed back to the bandit (whether it improved depends on the stand-in
    # evaluator's hash-drawn speedups; test_llm_operators checks the learning itself).
    assert sum(s.children for s in stats.values()) >= 24
    assert controller.steering.budget.in_flight == 0


def test_islands_keep_proposals_prepared_but_never_more_requests_in_flight_than_set(tmp_path, builtin_tasks):
    with ScriptedLLMServer(Variants(latency_s=0.05)) as server:
        archive, _ = run(tmp_path, [builtin_tasks["gelu"], builtin_tasks["softmax"]], server, budget=40,
                         per_island=2, prepared=3)
    assert archive.child_evaluation_count() == 40
    assert server.peak <= 4, "2 islands x run.proposals_per_island=2 requests at once"
    flights = [json.loads(line).get("in_flight") for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    flights = [f for f in flights if f]
    assert max(f["proposals"] for f in flights) > 4, "proposals were prepared beyond the requests in flight"
    assert max(f["llm_requests"] for f in flights) <= 4


def test_the_call_budget_stops_proposing_cleanly_counting_requests_in_flight(tmp_path, builtin_tasks):
    with ScriptedLLMServer(Variants(latency_s=0.05)) as server:
        archive, controller = run(tmp_path, [builtin_tasks["gelu"]], server, budget=100,
                                  llm_budget=LLMBudget(calls=10), per_island=8)
    assert len(rows(archive, LLMCallRow)) == 10 and archive.child_evaluation_count() <= 10
    assert controller.steering.budget.spent_calls == 10 and "llm_budget_spent" in event_kinds(tmp_path)
    assert event_kinds(tmp_path)[-1] == "done"


def test_the_dollar_budget_is_never_exceeded(tmp_path, builtin_tasks):
    prices = {"openai/scripted": [1000.0, 1000.0]}  # 150 tokens a call: $0.15
    with ScriptedLLMServer(Variants()) as server:
        archive, _ = run(tmp_path, [builtin_tasks["gelu"]], server, budget=100, llm_budget=LLMBudget(usd=1.0),
                         prices=prices)
    spend = archive.llm_spend()
    assert spend["calls"] == 6 and 0.89 < spend["cost_usd"] <= 1.0


def test_a_spent_budget_leaves_the_offline_operators_running(tmp_path, builtin_tasks):
    with ScriptedLLMServer(Variants()) as server:
        archive, _ = run(tmp_path, [builtin_tasks["softmax"]], server, budget=16, llm_budget=LLMBudget(calls=3),
                         offline=True)
    # Never more requests than the budget; how many of the 3 get used depends on which operator
    # each proposal that reserved one drew, and when (a reservation an offline draw returns is freed).
    assert archive.child_evaluation_count() == 16 and 1 <= len(rows(archive, LLMCallRow)) <= 3
    assert {r.operator for r in rows(archive, ProgramRow)} >= {"seed", "constants"}


def test_crossover_children_have_two_parents_from_different_cells_or_islands(tmp_path, builtin_tasks):
    with ScriptedLLMServer(Variants()) as server:
        archive, _ = run(tmp_path, [builtin_tasks["softmax"]], server, budget=16, offline=True, crossover_only=True,
                         per_island=1)
    crossed = [archive.get(r.id) for r in rows(archive, ProgramRow) if r.operator == "llm_crossover"]
    assert crossed
    for child in crossed:
        parent, mate = (archive.get(i) for i in child.parent_ids)
        assert parent.descriptors != mate.descriptors or parent.island != mate.island


def test_failed_children_get_at_most_one_repair(tmp_path, builtin_tasks):
    with ScriptedLLMServer(Variants()) as server:
        archive, _ = run(tmp_path, [builtin_tasks["gelu"]], server, budget=24, repair=1.0, failing=True)
    programs = {r.id: r for r in rows(archive, ProgramRow)}
    repairs = [archive.get(pid) for pid, r in programs.items() if r.operator == "llm_repair"]
    assert repairs, "a failed child was repaired"
    parents = [p.parent_ids[0] for p in repairs]
    assert len(parents) == len(set(parents)), "one repair attempt per failed child"
    for parent_id in parents:
        failed = archive.get(parent_id)
        assert failed.operator in ("llm_diff", "llm_rewrite") and not failed.result.correct
    for repair in repairs:
        assert repair.result is None or repair.result.correct  # repaired: two VARIANT lines
    prompts = [r.prompt for r in rows(archive, LLMCallRow) if r.operator == "llm_repair"]
    assert prompts and all("does not compile" in p and "CompilationError" in p for p in prompts)


def test_repairs_count_against_the_cap_per_task(tmp_path, builtin_tasks):
    with ScriptedLLMServer(Variants()) as server:
        archive, _ = run(tmp_path, [builtin_tasks["gelu"], builtin_tasks["softmax"]], server, budget=100,
                         repair=1.0, failing=True, per_task=6, per_island=1, prepared=0)
    assert archive.child_evaluation_counts() == {"gelu": 6, "softmax": 6} and archive.pending() == []
    assert any(r.operator == "llm_repair" for r in rows(archive, ProgramRow))
    assert event_kinds(tmp_path)[-1] == "done" and "stalled" not in event_kinds(tmp_path)


@pytest.mark.parametrize("transport", ["litellm", "http"])
def test_the_api_key_reaches_the_endpoint_but_not_the_database_or_the_events(tmp_path, builtin_tasks, monkeypatch,
                                                                             transport):
    key = "sk-evo-test-4c1d9e"
    monkeypatch.setenv("EVO_TEST_KEY", key)
    seen = []
    variants = Variants()

    def reply(request):
        seen.append(request)
        return variants(request)

    with ScriptedLLMServer(reply) as server:
        archive, _ = run(tmp_path, [builtin_tasks["gelu"]], server, budget=4, api_key_env="EVO_TEST_KEY",
                         transport=transport)
    archive.close()
    assert seen and archive.child_evaluation_count() == 4
    for path in tmp_path.iterdir():
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path.name


FUSE = "Fuse every elementwise step"  # a sentence of one seed fragment (operators/prompts/fragments.txt)


class FusionPaysEvaluator(TrivialEvaluator):
    """Each FUSED line makes a kernel 10% faster, each other added line 1% slower: only children
    asked with a fragment that advises fusion improve on their parents."""

    def score(self, task_name, task_source, source):
        from evaluator.result import EvalResult, Status

        fused, lines = source.count("\nFUSED_"), source.count("\nVARIANT_")
        return EvalResult(status=Status.CORRECT, speedup=1.0 + 0.1 * fused - 0.01 * lines, device="fake")


def test_prompt_fragments_that_yield_improvements_spread_and_survive_a_resume(tmp_path, builtin_tasks):
    from operators.meta_prompt import STATE_KEY, PromptEvolution

    variants = Variants()

    def reply(request):
        status, body = variants(request)
        prompt = request["messages"][-1]["content"]
        if FUSE in prompt.split("## Guidance", 1)[-1] and "## Guidance" in prompt:
            text = body["choices"][0]["message"]["content"]
            body["choices"][0]["message"]["content"] = text.replace("VARIANT_", f"FUSED_{variants.count} = 1\nVARIANT_", 1)
        return status, body

    pool = PromptEvolution(evolve_every=8, max_fragments=10, min_trials=3)
    with ScriptedLLMServer(reply) as server:
        archive, controller = run(tmp_path, [builtin_tasks["gelu"]], server, budget=96, per_island=2, prompts=pool,
                                  evaluator=FusionPaysEvaluator())
    prompts = [r.prompt for r in rows(archive, LLMCallRow)]
    assert prompts and all("## Guidance" in p for p in prompts)
    fusing = [FUSE in p for p in prompts]
    assert sum(fusing[-32:]) > sum(fusing[:32]), "the fragment that pays is asked with more often"
    table = pool.table()
    assert FUSE in table[0]["text"] and table[0]["improvements"] > 0, "the best fragment advises fusion"
    assert all(row["improvements"] == 0 for row in table if FUSE not in row["text"])
    assert "prompt_bred" in event_kinds(tmp_path) and len(pool.fragments) <= 10
    assert any(row["parents"] for row in table), "bred fragments are in the pool"
    saved = json.loads(archive.get_meta(STATE_KEY))
    assert saved == pool.state(), "the pool is saved with the run's state when it ends"
    resumed = PromptEvolution(evolve_every=8, max_fragments=10, min_trials=3)
    resumed.restore(saved)
    assert resumed.table() == table

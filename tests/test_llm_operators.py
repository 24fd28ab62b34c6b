"""LLM operators, their prompts and replies, offline crossover, steering, and the island's routing."""
import copy
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from evaluator.result import EvalResult, Status
from evo.core.descriptors import by_names
from evo.core.kernel_source import find_tunables, normalized_hash
from evo.core.program import Program
from islands import Island
from operators import (Context, LLMBudget, LLMClient, LLMCrossover, LLMDiff, LLMMutation, LLMRepair,
                       ModelEnsemble, ParameterCrossover, TunableConstantMutation)
from operators.prompting import render
from operators.replies import apply_diff
from tests.support.llm_server import Gate, ScriptedLLMServer, Variants, completion

FACTS = dict(registers=40, spills=0, shared_bytes=8192, num_warps=4, num_stages=2)


def program(task, pid=1, island=0, status=Status.CORRECT, speedup=1.5, descriptors=None, source=None, **result):
    res = EvalResult(status=status, speedup=speedup, **result)
    src = source or task.seeds[0]
    return Program(id=pid, task=task.name, island=island, generation=0, operator="seed", source=src, result=res,
                   descriptors=descriptors or {"memory": "plain"}, source_hash=normalized_hash(src))


def make_context(task, **kw):
    parent = program(task, roofline_fraction=0.42, **FACTS)
    return Context(task_name=task.name, task_source=task.source, parent=parent, hardware="NVIDIA H200",
                   failures=[{"operator": "llm_diff", "status": "compile_error", "reason": "tl.foo is undefined"}],
                   **{"target": {"memory": "tiled"}, **kw})


def test_prompts_carry_reference_parents_facts_failures_target_and_hardware(builtin_tasks):
    task = builtin_tasks["softmax"]
    ctx = make_context(task)
    ctx.inspirations = [program(task, pid=2, speedup=2.0, descriptors={"memory": "tiled"})]
    for template in ("rewrite.jinja", "diff.jinja"):
        prompt = render(template, ctx)
        for text in ("torch.softmax", "softmax_kernel", "NVIDIA H200", "1.500x", "2.000x", "42.0%",
                     "registers=40", "shared_bytes=8192", "num_stages=2", "memory=plain",
                     "tl.foo is undefined", "shared-memory tiling"):
            assert text in prompt, (template, text)
    assert "<<<<<<< SEARCH" in render("diff.jinja", ctx)
    assert "## Guidance" not in render("rewrite.jinja", ctx)
    ctx.guidance = "- Fuse every elementwise step."
    for template in ("rewrite.jinja", "diff.jinja"):
        assert "## Guidance\n- Fuse every elementwise step." in render(template, ctx)
    mate = program(task, pid=3, island=1, speedup=0.9)
    assert "Kernel B" in render("crossover.jinja", ctx, mate=mate) and "0.900x" in render("crossover.jinja", ctx,
                                                                                             mate=mate)
    failed = program(task, status=Status.RUNTIME_ERROR, speedup=None, reason="illegal memory access",
                     error="Traceback ...\nRuntimeError: CUDA error: an illegal memory access")
    ctx.parent, ctx.repair = failed, True
    prompt = render("repair.jinja", ctx)
    assert "runtime_error" in prompt and "illegal memory access" in prompt and "Traceback" in prompt


SOURCE = "A = 1\n\ndef f(x):\n    return x + A\n\nclass ModelNew:\n    pass\n"


@pytest.mark.parametrize("reply, expected, why", [
    ("<<<<<<< SEARCH\n    return x + A\n=======\n    return x * A\n>>>>>>> REPLACE", "return x * A", ""),
    ("text\n<<<<<<< SEARCH\nA = 1\n=======\nA = 2\n>>>>>>> REPLACE\n<<<<<<< SEARCH\ndef f(x):\n=======\n"
     "def f(x, y=0):\n>>>>>>> REPLACE\n", "def f(x, y=0):", ""),
    ("<<<<<<< SEARCH\nreturn x + A   \n=======\n    return -x\n>>>>>>> REPLACE", "    return -x\n", ""),  # indentation
    ("<<<<<<< SEARCH\nB = 3\n=======\nB = 4\n>>>>>>> REPLACE", None, "matches nowhere"),
    ("<<<<<<< SEARCH\n    pass\n=======\n    x = 1\n>>>>>>> REPLACE", "    x = 1", ""),
    ("<<<<<<< SEARCH\nA = 1\n=======\nA = 2\n", None, "not closed"),
    ("```python\nclass ModelNew:\n    y = 2\n```", "y = 2", ""),  # a whole module instead of a diff
    ("no edits", None, "no SEARCH/REPLACE block"),
])
def test_apply_diff(reply, expected, why):
    source, reason = apply_diff(SOURCE, reply)
    if expected is None:
        assert source is None and why in reason
    else:
        assert expected in source and reason == ""


def test_apply_diff_refuses_an_ambiguous_search():
    source, reason = apply_diff("x = 1\nx = 1\n", "<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE")
    assert source is None and "several places" in reason


@pytest.fixture(scope="module")
def server():
    with ScriptedLLMServer(Variants()) as s:
        yield s


def llm_client(server, **kw):
    return LLMClient(model="openai/scripted", api_base=server.api_base, timeout_s=10, retries=0, **kw)


def test_diff_rewrite_and_crossover_make_children_through_a_server(builtin_tasks, server):
    task = builtin_tasks["softmax"]
    rng = np.random.default_rng(0)
    for op in (LLMDiff(client=llm_client(server)), LLMMutation(client=llm_client(server))):
        proposal = op.propose(make_context(task), rng)
        assert proposal.source and "VARIANT_" in proposal.source and proposal.note == "", proposal.note
        assert proposal.llm_calls[0]["prompt"] and proposal.llm_calls[0]["model"] == "openai/scripted"
    op = LLMCrossover(client=llm_client(server))
    ctx = make_context(task, inspirations=[program(task, pid=1)])  # the parent itself: no mate
    assert "no second parent" in op.propose(ctx, rng).note
    other = program(task, pid=5, descriptors={"memory": "tiled"}, source=task.seeds[0] + "\nZ = 1\n")
    ctx = make_context(task, inspirations=[other])
    proposal = op.propose(ctx, rng)
    assert proposal.source and "Z = 1" in proposal.llm_calls[0]["prompt"] and proposal.mates == (5,)


def test_repair_needs_a_failed_child(builtin_tasks, server):
    task = builtin_tasks["gelu"]
    op = LLMRepair(client=llm_client(server), probability=1.0)
    assert "failed child" in op.propose(make_context(task), np.random.default_rng(0)).note
    ctx = make_context(task, repair=True)
    ctx.parent = program(task, status=Status.COMPILE_ERROR, speedup=None, reason="bad", error="SyntaxError")
    proposal = op.propose(ctx, np.random.default_rng(0))
    assert proposal.source and "SyntaxError" in proposal.llm_calls[0]["prompt"]
    with pytest.raises(ValueError):
        LLMRepair(client=llm_client(server), probability=2)


def test_parameter_crossover_takes_values_from_another_elite(builtin_tasks):
    task = builtin_tasks["softmax"]
    parent_source = task.seeds[0]
    mate_source = parent_source.replace("BLOCK_SIZE = 256", "BLOCK_SIZE = 1024").replace("NUM_WARPS = 4",
                                                                                         "NUM_WARPS = 8")
    ctx = make_context(task, inspirations=[program(task, pid=9, source=mate_source)])
    op = ParameterCrossover()
    seen = set()
    for seed in range(10):
        proposal = op.propose(ctx, np.random.default_rng(seed))
        values = {t.name: t.value for t in find_tunables(proposal.source)}
        assert values["NUM_STAGES"] == 1 and (values["BLOCK_SIZE"], values["NUM_WARPS"]) != (256, 4)
        seen.add((values["BLOCK_SIZE"], values["NUM_WARPS"]))
        assert proposal.mates == (9,)
    assert len(seen) == 3
    ctx.inspirations = [program(task, pid=9)]
    assert "no other elite" in op.propose(ctx, np.random.default_rng(0)).note


def test_budget_counts_requests_in_flight():
    budget = LLMBudget(calls=3)
    budget.start(), budget.start(), budget.start()
    assert not budget.can_start() and not budget.exhausted
    for _ in range(3):
        budget.finish([{"cost_usd": 0.01, "prompt_tokens": 10, "completion_tokens": 5, "error": "x"},
                       {"cost_usd": 0.01, "prompt_tokens": 10, "completion_tokens": 5, "error": ""}])
    assert budget.spent_calls == 3 and budget.spent_tokens == 90 and budget.exhausted
    usd = LLMBudget(usd=0.1)
    usd.start()
    assert not usd.can_start(), "nothing measured yet: one request at a time"
    usd.finish([{"cost_usd": 0.03}])
    assert usd.can_start()
    usd.start(), usd.start()
    assert not usd.can_start(), "0.03 spent + 3 in flight at 0.03 each > 0.1"
    free = LLMBudget(usd=1.0)
    free.start()
    free.finish([{"cost_usd": 0.0}])
    free.start(), free.start()
    assert free.can_start(), "a free model runs many requests at once under a dollar budget"
    resumed = LLMBudget(calls=5)
    resumed.resume({"calls": 5, "cost_usd": 0.2, "errors": 1})
    assert resumed.exhausted and resumed.spent_usd == 0.2


def test_ensemble_learns_improvements_per_dollar():
    ensemble = ModelEnsemble(["cheap", "dear"])
    for _ in range(30):
        ensemble.charge("cheap", 0.001)
        ensemble.reward("cheap", True)
        ensemble.charge("dear", 0.01)
        ensemble.reward("dear", True)
    rng = np.random.default_rng(0)
    picks = [ensemble.choose(rng) for _ in range(100)]
    assert picks.count("cheap") > 90


def test_island_routes_repairs_and_respects_the_llm_budget(builtin_tasks, server):
    task = builtin_tasks["softmax"]
    client = llm_client(server)
    island = Island(0, [TunableConstantMutation(), LLMMutation(client=client), LLMRepair(client=client)],
                    [1.0, 1.0, 0.0], seed=1, descriptors=by_names(["memory", "compute"]))
    names = {island.propose(make_context(task, llm_allowed=False)).operator for _ in range(10)}
    assert names == {"constants"}
    ctx = make_context(task, repair=True)
    ctx.parent = program(task, status=Status.INCORRECT, speedup=None, reason="wrong values")
    assert island.propose(ctx).operator == "llm_repair"
    contexts = [make_context(task, target={}) for _ in range(6)]
    proposals = [island.propose(ctx) for ctx in contexts]
    assert {p.operator for p in proposals} == {"constants", "llm_rewrite"}
    for ctx, proposal in zip(contexts, proposals):  # the island aims LLM operators at a neighbouring cell
        assert bool(ctx.target) == (proposal.operator == "llm_rewrite")
        if ctx.target:
            assert "Direction to explore" in proposal.llm_calls[0]["prompt"]
    llm_only = Island(0, [LLMMutation(client=client)], [1.0], seed=1)
    assert "budget is spent" in llm_only.propose(make_context(task, llm_allowed=False)).note
    with pytest.raises(ValueError, match="not all zero|besides repair"):
        Island(0, [LLMRepair(client=client)], [0.0], seed=1)


def test_a_child_whose_analysis_fails_keeps_its_llm_calls(builtin_tasks, server, monkeypatch):
    import islands.island

    def fail(source, descriptors):
        raise SystemError("AST constructor recursion depth mismatch (before=27, after=18)")

    monkeypatch.setattr(islands.island, "analyse", fail)
    proposal = Island(0, [LLMMutation(client=llm_client(server))], [1.0], seed=1).propose(
        make_context(builtin_tasks["gelu"]))
    assert proposal.source is None and "SystemError" in proposal.note and len(proposal.llm_calls) == 1


def test_a_child_identical_to_its_parent_is_not_proposed(builtin_tasks):
    task = builtin_tasks["gelu"]
    ctx = make_context(task)
    reply = f"```python\n# only a comment changed\n{task.seeds[0]}```"
    with ScriptedLLMServer(lambda request: (200, completion(reply))) as s:
        island = Island(0, [LLMMutation(client=llm_client(s))], [1.0], seed=1)
        proposal = island.propose(ctx)
    assert proposal.source is None and "identical to its parent" in proposal.note


def test_an_island_sends_at_most_its_requests_at_once_and_the_prepared_wait(builtin_tasks):
    task = builtin_tasks["gelu"]
    with ScriptedLLMServer(Gate(2, Variants(latency_s=0.1))) as s:
        island = Island(0, [LLMMutation(client=llm_client(s))], [1.0], seed=1, requests=2)
        island = copy.copy(island)  # through __getstate__ and __setstate__: the limit survives
        with ThreadPoolExecutor(6) as pool:
            proposals = list(pool.map(island.propose, [make_context(task, sequence=n) for n in range(6)]))
    assert all(p.source is not None for p in proposals)
    assert s.peak == 2, "six proposals at once, two requests at a time"
    with pytest.raises(ValueError, match="requests in flight"):
        Island(0, [TunableConstantMutation()], [1.0], seed=1, requests=0)

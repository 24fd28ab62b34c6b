import numpy as np
import pytest

from evo.core.kernel_source import RANGES, find_tunables
from evo.core.program import Program
from operators import Context, LLMClient, LLMMutation, TunableConstantMutation
from operators.replies import extract_code
from tests.support.llm_server import ScriptedLLMServer, completion


def context(builtin_tasks, name="softmax", speedup=None):
    task = builtin_tasks[name]
    parent = Program(id=1, task=name, island=0, generation=0, operator="seed", source=task.seeds[0])
    return Context(task_name=name, task_source=task.source, parent=parent, hardware="H100")


def test_constant_mutation_moves_tunables_to_legal_neighbours(builtin_tasks):
    op = TunableConstantMutation(max_changes=2)
    rng = np.random.default_rng(0)
    for name in builtin_tasks:
        ctx = context(builtin_tasks, name)
        before = {t.name: t.value for t in find_tunables(ctx.parent.source)}
        for _ in range(10):
            proposal = op.propose(ctx, rng)
            assert proposal.source is not None and proposal.source != ctx.parent.source, proposal.note
            after = {t.name: t for t in find_tunables(proposal.source)}
            changed = [n for n in before if after[n].value != before[n]]
            assert 1 <= len(changed) <= 2
            for n in changed:
                low, high = RANGES[after[n].kind]
                assert low <= after[n].value <= high


def test_constant_mutation_is_reproducible(builtin_tasks):
    op = TunableConstantMutation()
    ctx = context(builtin_tasks)
    a = [op.propose(ctx, np.random.default_rng(7)).source for _ in range(3)]
    b = [op.propose(ctx, np.random.default_rng(7)).source for _ in range(3)]
    assert a == b


def test_constant_mutation_moves_grid_shape_constants_by_powers_of_two(builtin_tasks):
    ctx = context(builtin_tasks)
    ctx.parent.source = "ROWS_PER_PROGRAM = 4\n"
    rng = np.random.default_rng(0)
    values = {TunableConstantMutation().propose(ctx, rng).source for _ in range(40)}
    assert values == {f"ROWS_PER_PROGRAM = {v}\n" for v in (1, 2, 8, 16)}


def test_constant_mutation_without_tunables_makes_no_child(builtin_tasks):
    ctx = context(builtin_tasks)
    ctx.parent.source = "class ModelNew:\n    pass\n"
    proposal = TunableConstantMutation().propose(ctx, np.random.default_rng(0))
    assert proposal.source is None and "no tunable" in proposal.note
    with pytest.raises(ValueError):
        TunableConstantMutation(max_changes=0)


@pytest.mark.parametrize("reply, expected", [
    ("```python\nclass ModelNew: pass\n```", "class ModelNew: pass\n"),
    ("first\n```python\nx = 1\n```\nthen\n```py\nclass ModelNew: pass\n```", "class ModelNew: pass\n"),
    ("```\nclass ModelNew: pass\n```", "class ModelNew: pass\n"),
    ("```python\nclass ModelNew: pass\n", "class ModelNew: pass\n"),  # truncated: no closing fence
    ("```python\nshort\n```\n```python\nmuch longer code\n```", "much longer code\n"),
    ("I cannot help with that.", None),
    ("", None),
    ("```json\n{}\n```", None),
])
def test_extract_code(reply, expected):
    assert extract_code(reply) == expected


def test_llm_mutation_against_a_loopback_server(builtin_tasks):
    with ScriptedLLMServer() as server:
        client = LLMClient(model="openai/scripted", api_base=server.api_base, timeout_s=10, retries=0)
        op = LLMMutation(client=client)
        ctx = context(builtin_tasks)
        proposal = op.propose(ctx, np.random.default_rng(0))
    assert proposal.source is not None and "NUM_WARPS = 2" in proposal.source
    assert proposal.source != ctx.parent.source
    (call,) = proposal.llm_calls
    assert call["prompt_tokens"] == 100 and call["completion_tokens"] == 50 and call["error"] == ""
    prompt = server.requests[0]["messages"][-1]["content"]
    assert "torch.softmax" in prompt and "softmax_kernel" in prompt and "H100" in prompt
    assert server.requests[0]["model"] == "scripted"


def test_llm_failures_become_failed_proposals(builtin_tasks):
    with ScriptedLLMServer(lambda request: (500, {"error": {"message": "overloaded"}})) as server:
        op = LLMMutation(client=LLMClient(model="openai/scripted", api_base=server.api_base, timeout_s=5,
                                          retries=0))
        proposal = op.propose(context(builtin_tasks), np.random.default_rng(0))
    assert proposal.source is None and "LLM call failed" in proposal.note
    assert proposal.llm_calls[0]["error"]


def test_garbage_reply_is_not_a_child(builtin_tasks):
    with ScriptedLLMServer(lambda request: (200, completion("no code here, sorry"))) as server:
        op = LLMMutation(client=LLMClient(model="openai/scripted", api_base=server.api_base, retries=0))
        proposal = op.propose(context(builtin_tasks), np.random.default_rng(0))
    assert proposal.source is None and "no Python code block" in proposal.note


def test_a_parent_that_spills_registers_gets_no_child_with_more_work_per_thread(builtin_tasks):
    from evaluator import EvalResult, Status

    ctx = context(builtin_tasks)
    ctx.parent.source = "K0_NUM_WARPS = 4\nK0_BLOCK_M = 128\nK0_NUM_STAGES = 3\n"
    op, rng = TunableConstantMutation(max_changes=3), np.random.default_rng(0)

    def moves() -> dict[str, set[int]]:
        seen: dict[str, set[int]] = {}
        for _ in range(60):
            proposal = op.propose(ctx, rng)
            for t in find_tunables(proposal.source):
                seen.setdefault(t.name, set()).add(t.value)
        return seen

    free = moves()
    assert min(free["K0_NUM_WARPS"]) < 4 and max(free["K0_BLOCK_M"]) > 128  # both ways, without spills
    ctx.parent.result = EvalResult(status=Status.CORRECT, speedup=0.5, spills=50)
    spilling = moves()
    assert min(spilling["K0_NUM_WARPS"]) == 4 and max(spilling["K0_NUM_WARPS"]) > 4
    assert max(spilling["K0_BLOCK_M"]) == 128 and min(spilling["K0_BLOCK_M"]) < 128
    assert spilling["K0_NUM_STAGES"] == {2, 3, 4}  # stages move either way
    ctx.parent.source = "NUM_WARPS = 32\n"  # already the most warps: nothing is left to try
    proposal = op.propose(ctx, rng)
    assert proposal.source is None and "spills registers" in proposal.note

"""LLM operators: rewrite, diff, crossover, repair and seed, each one prompt and one reply.

They share one shape: render a template (``operators/prompts/``) from the
context, ask the model the run's ensemble picked (``Context.model``), and
turn the reply into a child with ``operators.replies``.  Every attempt of the
request comes back in ``Proposal.llm_calls``; a failed call or an unusable
reply is a proposal without a source and a one-line reason, never an error.
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from evo.core.program import LLM_SEED, Program
from operators.base import Context, Operator, Proposal
from operators.llm_client import LLMClient
from operators.prompting import check_template, render
from operators.replies import apply_diff, code_from_reply


# Tokens a prompt is trimmed towards (operators.prompting's rule): room for a KernelBench reference, the
# parent and two inspirations with their profiles, well inside every current model's context.
PROMPT_BUDGET_TOKENS = 8000


class LLMOperator(Operator):
    """The shared request/reply path; subclasses choose the template, the extra programs and the reply format."""

    needs_llm = True
    default_template = ""
    temperature: float | None = None  # None: the client's (llm.temperature)

    def __init__(self, *, client: LLMClient, template: str | None = None, max_inspirations: int = 2,
                 prompt_budget_tokens: int | None = PROMPT_BUDGET_TOKENS):
        """``prompt_budget_tokens``: the prompt is trimmed towards it by ``operators.prompting``'s
        rule (None: never trimmed)."""
        if not isinstance(client, LLMClient):
            raise TypeError(f"{type(self).__name__} needs an LLMClient (set llm.model), not {type(client).__name__}")
        if max_inspirations < 0:
            raise ValueError("max_inspirations must be >= 0")
        if prompt_budget_tokens is not None and prompt_budget_tokens <= 0:
            raise ValueError("prompt_budget_tokens must be > 0, or null for no budget")
        self.template = template or self.default_template
        check_template(self.template)
        self.client = client
        self.max_inspirations = max_inspirations
        self.prompt_budget_tokens = prompt_budget_tokens

    def extra(self, context: Context, rng: np.random.Generator) -> dict[str, Program | str] | str:
        """Programs (and words) the template needs beyond the parent, or the reason this operator cannot run."""
        return {}

    def child(self, context: Context, reply: str) -> tuple[str | None, str]:
        return code_from_reply(reply)

    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        extra = self.extra(context, rng)
        if isinstance(extra, str):
            return Proposal(self.name, None, extra)
        context.inspirations = context.inspirations[: self.max_inspirations]
        prompt = render(self.template, context, self.prompt_budget_tokens, **extra)
        with context.request_slots or nullcontext():
            reply = self.client.complete([{"role": "user", "content": prompt}], model=context.model,
                                         temperature=self.temperature)
        calls = [dict(call, prompt=prompt) for call in reply.calls]
        if reply.text is None:
            return Proposal(self.name, None, f"LLM call failed: {reply.error}", calls)
        try:
            source, why = self.child(context, reply.text)
        except Exception as exc:  # a reply no rule foresaw: the calls it cost are still accounted
            source, why = None, f"the reply could not be used: {type(exc).__name__}: {exc}"
        return Proposal(self.name, source, why, calls,
                        mates=tuple(p.id for p in extra.values() if isinstance(p, Program)))


class LLMMutation(LLMOperator):
    """Full rewrite of the parent, prompted with the reference and other elites."""

    name = "llm_rewrite"
    default_template = "rewrite.jinja"


class LLMDiff(LLMOperator):
    """Edits of the parent as SEARCH/REPLACE blocks: cheap replies, small steps."""

    name = "llm_diff"
    default_template = "diff.jinja"

    def __init__(self, *, client: LLMClient, template: str | None = None, max_inspirations: int = 1,
                 prompt_budget_tokens: int | None = PROMPT_BUDGET_TOKENS):
        super().__init__(client=client, template=template, max_inspirations=max_inspirations,
                         prompt_budget_tokens=prompt_budget_tokens)

    def child(self, context: Context, reply: str) -> tuple[str | None, str]:
        return apply_diff(context.parent.source, reply)


class LLMCrossover(LLMOperator):
    """One child from two parents in different cells or islands."""

    name = "llm_crossover"
    default_template = "crossover.jinja"

    def extra(self, context: Context, rng: np.random.Generator) -> dict[str, Program] | str:
        parent = context.parent
        mates = [p for p in context.inspirations if p.id != parent.id and p.source_hash != parent.source_hash
                 and (p.descriptors != parent.descriptors or p.island != parent.island)]
        if not mates:
            return "no second parent in another cell or island"
        mate = mates[int(rng.integers(len(mates)))]
        context.inspirations = []  # the prompt shows the two parents only
        return {"mate": mate}


class LLMRepair(LLMOperator):
    """Fix a child that failed to compile, crashed or was incorrect, given the evaluator's error.

    Never drawn by weight: the run loop schedules it for a failed child, with
    probability ``probability`` and at most once per failed child.
    """

    name = "llm_repair"
    repairs = True
    default_template = "repair.jinja"

    def __init__(self, *, client: LLMClient, probability: float = 0.5, template: str | None = None,
                 max_inspirations: int = 0, prompt_budget_tokens: int | None = PROMPT_BUDGET_TOKENS):
        super().__init__(client=client, template=template, max_inspirations=max_inspirations,
                         prompt_budget_tokens=prompt_budget_tokens)
        if not 0.0 <= probability <= 1.0:
            raise ValueError("the repair probability must be between 0 and 1")
        self.probability = probability

    def extra(self, context: Context, rng: np.random.Generator) -> dict[str, Program] | str:
        result = context.parent.result
        if not context.repair or result is None or result.correct:
            return "repair needs a failed child with its evaluation"
        return {}


# Approaches a seed attempt is asked to take, in turn, so that a task's first kernels differ.
SEED_STRATEGIES = (
    "the most direct translation: one Triton kernel per operation of the reference",
    "fuse every elementwise operation into the kernel that produces or consumes its data",
    "one program per row (or per output tile), with the whole reduction in registers where it fits",
    "a loop over blocks inside each program, accumulating in float32, so any size fits",
    "tensor cores through tl.dot for every matrix product or convolution, with 2-D tiles",
    "a persistent kernel: about one program per SM, each looping over many tiles",
)


class LLMSeed(LLMOperator):
    """A first kernel for a task that has none, written from the reference alone.

    Never drawn by weight: the run loop asks for seeds for a task without a
    correct program (``run.llm_seeds`` at a time, ``run.llm_seed_attempts``
    in all).  Attempt ``n`` of a task is asked for ``strategies[n % len]``, at
    ``temperature``, so that the first kernels differ from one another.
    """

    name = LLM_SEED
    seeds = True
    default_template = "seed.jinja"

    def __init__(self, *, client: LLMClient, template: str | None = None, strategies: list[str] | None = None,
                 temperature: float | None = 1.0):
        super().__init__(client=client, template=template, max_inspirations=0)
        self.strategies = list(strategies if strategies is not None else SEED_STRATEGIES)
        if not self.strategies or not all(isinstance(s, str) and s.strip() for s in self.strategies):
            raise ValueError("a seed operator needs a non-empty list of strategies (sentences)")
        if temperature is not None and temperature < 0:
            raise ValueError("the seed temperature must be >= 0 or null (llm.temperature)")
        self.temperature = temperature

    def extra(self, context: Context, rng: np.random.Generator) -> dict[str, Program | str] | str:
        if context.parent is not None:
            return "a seed is written from the reference: its proposal has no parent"
        return {"strategy": self.strategies[context.attempt % len(self.strategies)]}

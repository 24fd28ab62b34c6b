"""LLM mutation: ask a model for a faster full rewrite of the parent kernel."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from evo.errors import LLMError
from operators.base import Context, Operator, Proposal
from operators.extract import extract_code
from operators.llm_client import LLMClient

PROMPTS = Path(__file__).parent / "prompts"


def _speedup(program) -> str:
    return f"{program.fitness:.3f}x" if program.fitness is not None else "unknown"


def render_prompt(template: str, context: Context) -> str:
    import jinja2  # only LLM operators render prompts

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(PROMPTS), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    return env.get_template(template).render(
        hardware=context.hardware, task_source=context.task_source.strip(),
        parent_source=context.parent.source.strip(), parent_speedup=_speedup(context.parent),
        inspirations=[{"speedup": _speedup(p), "source": p.source.strip()} for p in context.inspirations],
    )


class LLMMutation(Operator):
    """Full rewrite of the parent by an LLM, prompted with the reference and elites."""

    name = "llm_rewrite"
    needs_llm = True

    def __init__(self, *, client: LLMClient, template: str = "mutate.jinja", max_inspirations: int = 2):
        if not (PROMPTS / template).is_file():
            raise ValueError(f"prompt template {template!r} not found in {PROMPTS}")
        self.client = client
        self.template = template
        self.max_inspirations = max_inspirations

    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        context.inspirations = context.inspirations[: self.max_inspirations]
        prompt = render_prompt(self.template, context)
        try:
            completion = self.client.complete([{"role": "user", "content": prompt}])
        except LLMError as exc:
            call = {"model": self.client.model, "prompt": prompt, "prompt_tokens": 0, "completion_tokens": 0,
                    "cost_usd": 0.0, "latency_s": 0.0, "error": str(exc)}
            return Proposal(self.name, None, f"LLM call failed: {exc}", [call])
        source = extract_code(completion.text)
        note = "" if source else "the reply holds no Python code block"
        return Proposal(self.name, source, note, [dict(completion.record(), prompt=prompt)])

"""Rendering the LLM prompts: jinja2 templates in ``operators/prompts/``, within a token budget.

The templates decide the words; this module only turns a
:class:`~operators.base.Context` into plain template variables: the task's
reference, each program's source with its measured speedup, time beside eager
PyTorch's and torch.compile's, roofline floors, per-kernel profile
(``operators.prompt_facts``), descriptors and compiled facts, a failed
program's stage and error, recent failures on the island, the target cell, the
hardware and the guidance of an evolving prompt fragment.

A prompt longer than its budget (tokens estimated as characters over
:data:`CHARS_PER_TOKEN`) is rendered again with less detail, one step of
:data:`TRIM_STEPS` at a time, until it fits or no step is left: the other
programs' (inspirations', a crossover's second parent's) kernel rows, then
their whole profile (times, baselines, floors: their speedup stays), then the
parent's kernel rows beyond the 3 with most device time, then beyond the first,
then the error shown to 5 lines, then to 1.  The parent's own time, baselines
and floors, and every source, are never cut.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

from evo.core.program import Program
from operators import prompt_facts
from operators.base import Context

PROMPTS = Path(__file__).parent / "prompts"
COMPILED_FACTS = ("registers", "spills", "shared_bytes", "num_warps", "num_stages")
CHARS_PER_TOKEN = 4  # a cheap estimate of a prompt's tokens: no tokenizer is loaded to render one


@dataclass(frozen=True)
class Detail:
    """How much of each program's evaluation a prompt shows."""

    parent_kernels: int | None = None  # kernel rows of the parent (None: all)
    other_kernels: int | None = None  # of the other programs shown
    other_profile: bool = True  # the other programs' times, baselines and floors
    error_lines: int = 20  # of a failed program's error


FULL = Detail()
# The trim rule, in order; each step keeps the ones before it.
TRIM_STEPS = (dict(other_kernels=0), dict(other_profile=False), dict(parent_kernels=3), dict(parent_kernels=1),
              dict(error_lines=5), dict(error_lines=1))


def check_template(template: str) -> None:
    if not (PROMPTS / template).is_file():
        names = ", ".join(sorted(p.name for p in PROMPTS.glob("[!_]*.jinja")))
        raise ValueError(f"prompt template {template!r} not found in {PROMPTS}; there are: {names}")


@functools.cache
def _environment():
    import jinja2  # only LLM operators render prompts

    return jinja2.Environment(loader=jinja2.FileSystemLoader(PROMPTS), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=False)


def program_vars(program: Program, kernels: int | None = None, profile: bool = True, error_lines: int = 20) -> dict:
    """One program as the templates see it: ``kernels`` rows of its profile at most (None: all), none of
    its times, baselines and floors unless ``profile``, ``error_lines`` of a failure's error."""
    result = program.result
    compiled = {}
    if result is not None:
        compiled = {name: getattr(result, name) for name in COMPILED_FACTS if getattr(result, name) is not None}
    roofline = result.roofline_fraction if result is not None else None
    floors = prompt_facts.floors(result) if profile else ""  # with the fraction reached, where measured
    return {
        "source": program.source.strip(),
        "speedup": f"{program.fitness:.3f}x" if program.fitness is not None else "",
        "roofline": f"{roofline:.1%}" if roofline is not None and not floors else "",
        "timing": prompt_facts.timing(result) if profile else "",
        "floors": floors,
        "kernels": prompt_facts.kernel_rows(result, kernels) if profile and kernels != 0 else {},
        "descriptors": {k: v for k, v in program.descriptors.items() if v != "none"},
        "compiled": compiled,
        "status": result.status.value if result is not None else "not evaluated",
        "stage": result.extra.get("stage", "") if result is not None else "",
        "reason": (result.reason or "") if result is not None else "",
        "error": prompt_facts.error_excerpt(result.error or "", error_lines) if result is not None else "",
    }


def render(template: str, context: Context, budget_tokens: int | None = None, **extra: Program | str) -> str:
    """The prompt for ``context``, trimmed to ``budget_tokens`` by :data:`TRIM_STEPS` (None: no budget);
    ``extra`` programs (e.g. ``mate``) are rendered like the inspirations, other ``extra`` values (a
    seed's ``strategy``) as they are."""
    detail = FULL
    prompt = _render(template, context, detail, extra)
    steps = iter(TRIM_STEPS)
    while budget_tokens is not None and len(prompt) > budget_tokens * CHARS_PER_TOKEN:
        step = next(steps, None)
        if step is None:
            break  # the sources and the parent's own figures are never cut
        detail = replace(detail, **step)
        prompt = _render(template, context, detail, extra)
    return prompt


def _render(template: str, context: Context, detail: Detail, extra: dict) -> str:
    def other(p: Program) -> dict:
        return program_vars(p, detail.other_kernels, detail.other_profile, detail.error_lines)

    return _environment().get_template(template).render(
        hardware=context.hardware, task_source=context.task_source.strip(),
        parent=program_vars(context.parent, detail.parent_kernels, True, detail.error_lines)
        if context.parent is not None else None,
        inspirations=[other(p) for p in context.inspirations],
        failures=list(context.failures), target=sorted(context.target.items()), guidance=context.guidance,
        **{name: other(p) if isinstance(p, Program) else p for name, p in extra.items()},
    )

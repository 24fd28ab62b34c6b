"""Rendering the LLM prompts: jinja2 templates in ``operators/prompts/``.

The templates decide the words; this module only turns a
:class:`~operators.base.Context` into plain template variables: the task's
reference, each program's source with its measured speedup, roofline
fraction, descriptors and compiled facts, recent failures on the island, the
target cell, the hardware and the guidance of an evolving prompt fragment.
"""
from __future__ import annotations

import functools
from pathlib import Path

from evo.core.program import Program
from operators.base import Context

PROMPTS = Path(__file__).parent / "prompts"
COMPILED_FACTS = ("registers", "spills", "shared_bytes", "num_warps", "num_stages")
MAX_ERROR_CHARS = 3000


def check_template(template: str) -> None:
    if not (PROMPTS / template).is_file():
        names = ", ".join(sorted(p.name for p in PROMPTS.glob("[!_]*.jinja")))
        raise ValueError(f"prompt template {template!r} not found in {PROMPTS}; there are: {names}")


@functools.cache
def _environment():
    import jinja2  # only LLM operators render prompts

    return jinja2.Environment(loader=jinja2.FileSystemLoader(PROMPTS), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=False)


def program_vars(program: Program) -> dict:
    """One program as the templates see it."""
    result = program.result
    compiled = {}
    if result is not None:
        compiled = {name: getattr(result, name) for name in COMPILED_FACTS if getattr(result, name) is not None}
    error = (result.error or "") if result is not None else ""
    if len(error) > MAX_ERROR_CHARS:
        error = "...\n" + error[-MAX_ERROR_CHARS:]
    roofline = result.roofline_fraction if result is not None else None
    return {
        "source": program.source.strip(),
        "speedup": f"{program.fitness:.3f}x" if program.fitness is not None else "",
        "roofline": f"{roofline:.1%}" if roofline is not None else "",
        "descriptors": {k: v for k, v in program.descriptors.items() if v != "none"},
        "compiled": compiled,
        "status": result.status.value if result is not None else "not evaluated",
        "reason": (result.reason or "") if result is not None else "",
        "error": error.strip(),
    }


def render(template: str, context: Context, **extra: Program | str) -> str:
    """The prompt for ``context``; ``extra`` programs (e.g. ``mate``) are rendered like the parent,
    other ``extra`` values (a seed's ``strategy``) as they are."""
    return _environment().get_template(template).render(
        hardware=context.hardware, task_source=context.task_source.strip(),
        parent=program_vars(context.parent) if context.parent is not None else None,
        inspirations=[program_vars(p) for p in context.inspirations],
        failures=list(context.failures), target=sorted(context.target.items()), guidance=context.guidance,
        **{name: program_vars(p) if isinstance(p, Program) else p for name, p in extra.items()},
    )

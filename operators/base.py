"""The operator interface: parents and context in, a child's source out."""
from __future__ import annotations

import abc
from dataclasses import dataclass, field

import numpy as np

from evo.program import Program


@dataclass
class Context:
    """Everything an operator may use to derive a child."""

    task_name: str
    task_source: str
    parent: Program
    inspirations: list[Program] = field(default_factory=list)
    hardware: str = ""


@dataclass
class Proposal:
    """A child source, or None with the reason no child was made."""

    operator: str
    source: str | None
    note: str = ""
    llm_calls: list[dict] = field(default_factory=list)  # model, tokens, cost, latency, error
    source_hash: str = ""  # filled in by the island that made the proposal
    descriptors: dict[str, str] = field(default_factory=dict)


class Operator(abc.ABC):
    """Derives one child from a parent.  Implementations are plain, picklable classes."""

    name: str = "operator"
    needs_llm: bool = False

    @abc.abstractmethod
    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        """Return a child of ``context.parent`` (never raise for a bad parent or model output)."""

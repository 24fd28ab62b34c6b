"""The operator interface: parents and context in, a child's source out."""
from __future__ import annotations

import abc
import ast
import threading
from dataclasses import dataclass, field

import numpy as np

from evo.core.kernel_facts import top_level_kernels
from evo.core.kernel_source import parse
from evo.core.program import Program


@dataclass
class Context:
    """Everything an operator may use to derive a child."""

    task_name: str
    task_source: str
    parent: Program | None  # None: a seed proposal, the first kernels of a task without one
    inspirations: list[Program] = field(default_factory=list)  # other elites of the task, any island
    hardware: str = ""
    failures: list[dict] = field(default_factory=list)  # recent failures on the island: operator, status, reason
    model: str | None = None  # the model an LLM operator asks (picked by the run's ensemble); None: the first
    llm_allowed: bool = True  # False once the LLM budget is spent: only offline operators may run
    repair: bool = False  # ``parent`` is a failed child (with its result) for a repair operator to fix
    sweep: bool = False  # ``parent`` is a new elite; the sweep operator makes its ``attempt``-th neighbour
    target: dict[str, str] = field(default_factory=dict)  # a cell to aim for, {descriptor: bin}; set by the island
    sequence: int | None = None  # the run's proposal number: the island seeds this proposal's RNG with it
    attempt: int = 0  # a seed proposal's number among its task's: the seed operator varies its strategy by it
    guidance: str = ""  # advice for an LLM operator's prompt: an evolving fragment (operators.meta_prompt)
    # Set by the island: an LLM operator holds one of these while its request is out, so an island
    # keeps at most its share of requests in flight while proposals prepared beyond it wait here.
    request_slots: threading.Semaphore | None = None


@dataclass
class Proposal:
    """A child source, or None with the reason no child was made."""

    operator: str
    source: str | None
    note: str = ""
    llm_calls: list[dict] = field(default_factory=list)  # model, tokens, cost, latency, error
    mates: tuple[int, ...] = ()  # ids of the other parents of a crossover child
    source_hash: str = ""  # filled in by the island that made the proposal
    descriptors: dict[str, str] = field(default_factory=dict)


class Operator(abc.ABC):
    """Derives one child from a parent.  Implementations are plain, picklable classes."""

    name: str = "operator"
    needs_llm: bool = False
    repairs: bool = False  # run only on a failed child the run loop schedules for repair, never drawn by weight
    seeds: bool = False  # run only for a seed proposal (no parent) the run loop schedules, never drawn by weight
    sweeps: bool = False  # run only for a new elite's sweep the run loop schedules, never drawn by weight

    def applies_to(self, parent: Program) -> bool:
        """Whether this operator can change ``parent`` at all: an island draws only among those that
        can (a rewrite of matrix products, say, has nothing to do for an elementwise kernel)."""
        return True

    @abc.abstractmethod
    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        """Return a child of ``context.parent`` (never raise for a bad parent or model output)."""


class KernelRewrite(Operator):
    """An offline operator that rewrites one of the parent's top-level Triton kernels: those
    :meth:`analyse` accepts are its candidates, one drawn per child; where it accepts none, the
    reasons it gave for refusing the others are the proposal's note (else :attr:`nothing`)."""

    nothing: str = "no kernel this operator rewrites"

    @abc.abstractmethod
    def analyse(self, tree: ast.Module, fn: ast.FunctionDef):
        """What the rewrite needs of kernel ``fn``; a reason (str) where it must refuse a kernel of its
        kind; None where ``fn`` is not of its kind at all."""

    @abc.abstractmethod
    def rewrite(self, source: str, found) -> Proposal:
        """The child of ``source`` with the kernel ``found`` (an :meth:`analyse` result) rewritten."""

    def candidates(self, source: str) -> tuple[list, list[str]]:
        """The kernels this operator would rewrite, and why it refused any other of their kind."""
        try:
            tree = parse(source)
        except SyntaxError:
            return [], []
        found = [self.analyse(tree, fn) for fn in top_level_kernels(tree)]
        return [f for f in found if f is not None and not isinstance(f, str)], [f for f in found if isinstance(f, str)]

    def applies_to(self, parent: Program) -> bool:
        return bool(self.candidates(parent.source)[0])

    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        found, refused = self.candidates(context.parent.source)
        if not found:
            return Proposal(self.name, None, "; ".join(refused) or self.nothing)
        return self.rewrite(context.parent.source, found[int(rng.integers(len(found)))])

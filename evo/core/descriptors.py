"""Behaviour descriptors: which MAP-Elites cell a kernel belongs to.

Each descriptor maps a kernel's :class:`~evo.core.kernel_facts.KernelFacts` to one
of a fixed set of bins.  Two families:

- launch parameters a kernel engineer tunes first (``block_size``,
  ``num_warps``, ``num_stages``), bucketed by powers of two;
- strategies read from the kernel's structure: ``memory`` (plain loads,
  vectorised or block pointers, 2-D tiles, software pipelining), ``compute``
  (single pass, multi-pass, split over kernels, tensor cores) and
  ``parallel`` (1-D grid, 2-D grid, persistent, split-K).

Runs choose theirs with ``archive.descriptors``.  They are pure functions of
the source, computed once per child by the island that proposed it, off the
archive's single-writer path.

A third family is *measured* (``measured=True``): ``registers`` (per thread,
from the compiled kernel) and ``roofline`` (the fraction of the device's peak
reached, in percent buckets), read from the :class:`EvalResult`.  They are
known only after evaluation, so :func:`describe` leaves them out and the
archive completes a program's cell (:func:`complete`) when it records the
evaluation; without the fact (a failed candidate, the CPU interpreter) they
are ``none``.

A CVT archive (``archive.cvt_cells``, :mod:`evo.core.layouts`) needs continuous
values: :func:`by_names` with ``continuous=True`` gives :class:`Continuous`
variants of the numeric descriptors, whose labels are positions in [0, 1]
(log2 of block size and warps; registers over 255; the roofline fraction).
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Callable

from evaluator.result import EvalResult
from evo.core.errors import ConfigError
from evo.core.kernel_facts import KernelFacts, kernel_facts
from evo.core.kernel_source import normalized_hash, parse

NONE = "none"


def _known(facts_or_result, measured: bool) -> bool:
    """Whether there is something to describe: a parsed source, or an evaluation's result."""
    return facts_or_result is not None and (measured or facts_or_result.parses)


@dataclass(frozen=True)
class Descriptor:
    """Bins of a kernel's source facts, or, when ``measured``, of its evaluation's result."""

    name: str
    bins: tuple[str, ...]
    classify: Callable  # KernelFacts -> str, or EvalResult -> str when measured
    measured: bool = False

    def __call__(self, known: KernelFacts | EvalResult | None) -> str:
        label = self.classify(known) if _known(known, self.measured) else NONE
        return label if label in self.bins else NONE


def _powers(low: int, high: int) -> tuple[str, ...]:
    out, v = [], low
    while v <= high:
        out.append(str(v))
        v *= 2
    return tuple(out) + (NONE,)


def _bucket(kind: str, low: int, high: int) -> Callable[[KernelFacts], str]:
    def classify(facts: KernelFacts) -> str:
        values = [t.value for t in facts.tunables if t.kind == kind]
        if not values:
            return NONE
        bucket = 1 << (max(values).bit_length() - 1)  # round down to a power of two
        return str(min(max(bucket, low), high))
    return classify


def _memory(f: KernelFacts) -> str:
    if f.max_stages >= 2 and f.max_loops >= 1:
        return "pipelined"
    if f.tiles_2d:
        return "tiled"
    if f.block_pointers or f.hints:
        return "vectorized"
    return "plain"


def _compute(f: KernelFacts) -> str:
    if f.uses_dot:
        return "tensor_core"
    if f.kernels >= 2:
        return "split"
    return "multi_pass" if f.max_loops >= 2 else "single_pass"


def _parallel(f: KernelFacts) -> str:
    if f.persistent:
        return "persistent"
    if f.atomics and f.uses_dot:
        return "split_k"
    return "grid_2d" if f.program_axes >= 2 else "grid_1d"


@dataclass(frozen=True)
class Continuous:
    """A numeric descriptor as a position in [0, 1] (a label like ``0.4375``), for a CVT archive."""

    name: str
    low: float
    high: float
    value: Callable  # KernelFacts -> float | None, or EvalResult -> float | None when measured
    measured: bool = False
    bins: tuple[str, ...] = ()

    def __call__(self, known: KernelFacts | EvalResult | None) -> str:
        value = self.value(known) if _known(known, self.measured) else None
        if value is None:
            return NONE
        return f"{min(max((value - self.low) / (self.high - self.low), 0.0), 1.0):.4f}"


def _largest(kind: str) -> Callable[[KernelFacts], float | None]:
    def value(facts: KernelFacts) -> float | None:
        values = [t.value for t in facts.tunables if t.kind == kind and t.value > 0]
        return math.log2(max(values)) if values else None
    return value


def _edge(field: str, scale: float, edges: tuple[int, ...], *, upper: bool) -> Callable[[EvalResult], str]:
    """The edge bucketing the result's ``field`` (times ``scale``): the first at or above it
    (``upper``: edges are upper bounds), or the last at or below it (lower bounds)."""
    def classify(result: EvalResult) -> str:
        value = getattr(result, field)
        if value is None:
            return NONE
        if upper:
            return str(next((e for e in edges if value * scale <= e), edges[-1]))
        return str(max((e for e in edges if value * scale >= e), default=edges[0]))
    return classify


BLOCK_SIZE = Descriptor("block_size", _powers(16, 8192), _bucket("block", 16, 8192))
NUM_WARPS = Descriptor("num_warps", _powers(1, 32), _bucket("warps", 1, 32))
NUM_STAGES = Descriptor("num_stages", ("1", "2", "4", NONE), _bucket("stages", 1, 4))
MEMORY = Descriptor("memory", ("plain", "vectorized", "tiled", "pipelined", NONE), _memory)
COMPUTE = Descriptor("compute", ("single_pass", "multi_pass", "split", "tensor_core", NONE), _compute)
PARALLEL = Descriptor("parallel", ("grid_1d", "grid_2d", "persistent", "split_k", NONE), _parallel)

_REGISTER_EDGES = (32, 64, 128, 255)
REGISTERS = Descriptor("registers", tuple(map(str, _REGISTER_EDGES)) + (NONE,),
                       _edge("registers", 1, _REGISTER_EDGES, upper=True), measured=True)
_ROOFLINE_EDGES = (0, 10, 25, 50, 75)  # percent of the device's peak, lower edges
ROOFLINE = Descriptor("roofline", tuple(map(str, _ROOFLINE_EDGES)) + (NONE,),
                      _edge("roofline_fraction", 100, _ROOFLINE_EDGES, upper=False), measured=True)

DESCRIPTORS = {d.name: d for d in (BLOCK_SIZE, NUM_WARPS, NUM_STAGES, MEMORY, COMPUTE, PARALLEL, REGISTERS, ROOFLINE)}
DEFAULT_DESCRIPTORS = (BLOCK_SIZE, NUM_WARPS)

CONTINUOUS = {d.name: d for d in (
    Continuous("block_size", 4, 13, _largest("block")),  # log2: 16 .. 8192
    Continuous("num_warps", 0, 5, _largest("warps")),  # log2: 1 .. 32
    Continuous("num_stages", 0, 3, _largest("stages")),  # log2: 1 .. 8
    Continuous("registers", 0, 255, lambda r: r.registers, measured=True),
    Continuous("roofline", 0, 1, lambda r: r.roofline_fraction, measured=True),
)}


def by_names(names, *, continuous: bool = False) -> tuple:
    """Descriptors named in config, in order; ``continuous``: their variants for a CVT archive."""
    names = list(names)
    known = CONTINUOUS if continuous else DESCRIPTORS
    unknown = [n for n in names if n not in known]
    if unknown or not names or len(set(names)) != len(names):
        kind = "continuous descriptors (a CVT archive)" if continuous else "descriptors"
        raise ConfigError(f"archive.descriptors must name distinct {kind} from {', '.join(known)}; got {names}")
    return tuple(known[n] for n in names)


def describe(source: str, descriptors=DEFAULT_DESCRIPTORS, tree: ast.Module | None = None) -> dict[str, str]:
    """The source descriptors' values (measured ones are left to :func:`complete`); ``tree``: the
    source's AST, when the caller has parsed it already."""
    facts = kernel_facts(source, tree)  # parsed once for all descriptors
    return {d.name: d(facts) for d in descriptors if not d.measured}


def analyse(source: str, descriptors=DEFAULT_DESCRIPTORS) -> tuple[str, dict[str, str]]:
    """The source's normalised hash and descriptors' values, from one parse."""
    try:
        tree = parse(source)
    except SyntaxError:
        return normalized_hash(source), {d.name: d(KernelFacts(parses=False)) for d in descriptors if not d.measured}
    return normalized_hash(source, tree), describe(source, descriptors, tree)


def complete(values: dict[str, str], result: EvalResult, descriptors=DEFAULT_DESCRIPTORS) -> dict[str, str]:
    """All descriptors' values, in order: ``values`` for the source ones, ``result`` for measured ones."""
    return {d.name: d(result) if d.measured else values.get(d.name, NONE) for d in descriptors}


def cell_key(values: dict[str, str]) -> str:
    return "|".join(f"{k}={v}" for k, v in values.items())


def parse_cell_key(key: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in key.split("|") if "=" in part)


def grid_size(descriptors=DEFAULT_DESCRIPTORS) -> int:
    size = 1
    for d in descriptors:
        size *= len(d.bins)
    return size

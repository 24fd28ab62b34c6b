"""Behaviour descriptors: which MAP-Elites cell a kernel belongs to.

Each descriptor maps a kernel's :class:`~evo.kernel_facts.KernelFacts` to one
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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from evo.errors import ConfigError
from evo.kernel_facts import KernelFacts, kernel_facts

NONE = "none"


@dataclass(frozen=True)
class Descriptor:
    name: str
    bins: tuple[str, ...]
    classify: Callable[[KernelFacts], str]

    def __call__(self, facts: KernelFacts) -> str:
        label = self.classify(facts) if facts.parses else NONE
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


BLOCK_SIZE = Descriptor("block_size", _powers(16, 8192), _bucket("block", 16, 8192))
NUM_WARPS = Descriptor("num_warps", _powers(1, 32), _bucket("warps", 1, 32))
NUM_STAGES = Descriptor("num_stages", ("1", "2", "4", NONE), _bucket("stages", 1, 4))
MEMORY = Descriptor("memory", ("plain", "vectorized", "tiled", "pipelined", NONE), _memory)
COMPUTE = Descriptor("compute", ("single_pass", "multi_pass", "split", "tensor_core", NONE), _compute)
PARALLEL = Descriptor("parallel", ("grid_1d", "grid_2d", "persistent", "split_k", NONE), _parallel)

DESCRIPTORS = {d.name: d for d in (BLOCK_SIZE, NUM_WARPS, NUM_STAGES, MEMORY, COMPUTE, PARALLEL)}
DEFAULT_DESCRIPTORS = (BLOCK_SIZE, NUM_WARPS)


def by_names(names) -> tuple[Descriptor, ...]:
    """Descriptors named in config, in order."""
    names = list(names)
    unknown = [n for n in names if n not in DESCRIPTORS]
    if unknown or not names or len(set(names)) != len(names):
        raise ConfigError(f"archive.descriptors must name distinct descriptors from {', '.join(DESCRIPTORS)}; "
                          f"got {names}")
    return tuple(DESCRIPTORS[n] for n in names)


def describe(source: str, descriptors=DEFAULT_DESCRIPTORS) -> dict[str, str]:
    facts = kernel_facts(source)  # parsed once for all descriptors
    return {d.name: d(facts) for d in descriptors}


def cell_key(values: dict[str, str]) -> str:
    return "|".join(f"{k}={v}" for k, v in values.items())


def parse_cell_key(key: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in key.split("|") if "=" in part)


def grid_size(descriptors=DEFAULT_DESCRIPTORS) -> int:
    size = 1
    for d in descriptors:
        size *= len(d.bins)
    return size

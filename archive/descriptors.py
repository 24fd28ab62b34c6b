"""Behaviour descriptors: which MAP-Elites cell a kernel belongs to.

v1 describes a kernel by the launch parameters a kernel engineer tunes first:
the largest block size (bucketed by powers of two) and the warp count.
"""
from __future__ import annotations

from dataclasses import dataclass

from evo.kernel_source import find_tunables

NONE = "none"


@dataclass(frozen=True)
class Descriptor:
    name: str
    kind: str  # which tunables it reads (see evo.kernel_source)
    bins: tuple[str, ...]

    def __call__(self, source: str) -> str:
        values = [t.value for t in find_tunables(source) if t.kind == self.kind]
        if not values:
            return NONE
        value = max(values)
        bucket = 1 << (value.bit_length() - 1)  # round down to a power of two
        label = str(min(max(bucket, int(self.bins[0])), int(self.bins[-2])))
        return label


def _powers(low: int, high: int) -> tuple[str, ...]:
    out, v = [], low
    while v <= high:
        out.append(str(v))
        v *= 2
    return tuple(out) + (NONE,)


BLOCK_SIZE = Descriptor("block_size", "block", _powers(16, 8192))
NUM_WARPS = Descriptor("num_warps", "warps", _powers(1, 32))
DEFAULT_DESCRIPTORS = (BLOCK_SIZE, NUM_WARPS)


def describe(source: str, descriptors=DEFAULT_DESCRIPTORS) -> dict[str, str]:
    return {d.name: d(source) for d in descriptors}


def cell_key(values: dict[str, str]) -> str:
    return "|".join(f"{k}={v}" for k, v in values.items())


def grid_size(descriptors=DEFAULT_DESCRIPTORS) -> int:
    size = 1
    for d in descriptors:
        size *= len(d.bins)
    return size

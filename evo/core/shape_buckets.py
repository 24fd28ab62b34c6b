"""Shape buckets: which timed shape set an input size belongs to, and each program's speedup there.

With ``evaluator.time_shapes=all`` an evaluation times every shape set of its
task, and the archive keeps one ``shape_timings`` row per shape set
(:meth:`archive.queries.ArchiveReader.shape_timings`).  A bucket is one timed
shape set, identified by its numel (elements of all input tensors): an input of
n elements belongs to the smallest shape set with numel >= n, and anything
larger than the largest belongs to the largest's bucket (``max_numel=None``).
Shape sets of equal numel cannot be told apart by size, so they share a bucket;
a program's speedup there is the geometric mean of its speedups on them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Bucket:
    name: str  # the shape set's label, e.g. "rows=4096,cols=8192" (labels joined by " | " when several)
    numel: int  # the shape set's input elements
    max_numel: int | None  # the largest input it serves; None: the largest shape set and anything larger


@dataclass(frozen=True)
class BucketSpeedup:
    bucket: Bucket
    speedup: float
    speedup_noise: float | None


def buckets_of(timings: list[dict]) -> list[Bucket]:
    """The buckets of a task's shape timings, smallest first."""
    labels: dict[int, set[str]] = {}
    for t in timings:
        labels.setdefault(int(t["numel"]), set()).add(t["shape"])
    numels = sorted(labels)
    return [Bucket(" | ".join(sorted(labels[n])), n, None if n == numels[-1] else n) for n in numels]


def speedups_by_program(timings: list[dict]) -> dict[int, list[BucketSpeedup]]:
    """Per program, its speedup on each bucket whose shape sets it was all timed on, smallest bucket first."""
    buckets = {b.numel: b for b in buckets_of(timings)}
    shapes_of = {n: set(b.name.split(" | ")) for n, b in buckets.items()}
    measured: dict[tuple[int, int], dict[str, dict]] = {}
    for t in timings:
        if t["speedup"] is not None and t["speedup"] > 0:
            measured.setdefault((t["program_id"], int(t["numel"])), {})[t["shape"]] = t
    out: dict[int, list[BucketSpeedup]] = {}
    for (program, numel), by_shape in sorted(measured.items()):
        if set(by_shape) != shapes_of[numel]:
            continue  # a shape set of the bucket was not timed: no speedup for the bucket
        rows = list(by_shape.values())
        speedup = math.exp(sum(math.log(r["speedup"]) for r in rows) / len(rows))
        noises = [r["speedup_noise"] for r in rows if r["speedup_noise"] is not None]
        out.setdefault(program, []).append(BucketSpeedup(buckets[numel], speedup, max(noises) if noises else None))
    return out


def best_per_bucket(speedups: dict[int, list[BucketSpeedup]], k: int = 1,
                    min_speedup: float | None = None) -> dict[Bucket, list[tuple[int, BucketSpeedup]]]:
    """Per bucket, up to ``k`` (program id, speedup there) fastest first, at least ``min_speedup`` where given."""
    ranked: dict[Bucket, list[tuple[int, BucketSpeedup]]] = {}
    for program, entries in speedups.items():
        for s in entries:
            if min_speedup is None or s.speedup >= min_speedup:
                ranked.setdefault(s.bucket, []).append((program, s))
    return {b: sorted(found, key=lambda p: (-p[1].speedup, p[0]))[:k]
            for b, found in sorted(ranked.items(), key=lambda item: item[0].numel)}

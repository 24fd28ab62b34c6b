"""Shape buckets from shape timings: one per input size, each program's speedup there, the best per bucket."""
import pytest

from evo.core.shape_buckets import Bucket, best_per_bucket, buckets_of, speedups_by_program


def _timing(program, shape, numel, speedup, noise=0.01):
    return dict(program_id=program, shape=shape, numel=numel, speedup=speedup, speedup_noise=noise)


TIMINGS = [
    _timing(1, "n=10", 10, 2.0), _timing(1, "a=2,b=50", 100, 1.0), _timing(1, "a=50,b=2", 100, 4.0, 0.05),
    _timing(1, "n=1000", 1000, 0.5),
    _timing(2, "n=10", 10, 1.0), _timing(2, "a=2,b=50", 100, 1.5), _timing(2, "n=1000", 1000, 3.0),
    _timing(3, "n=10", 10, None), _timing(3, "n=1000", 1000, 3.0),  # no timing on the smallest
]


def test_one_bucket_per_size_the_largest_serving_anything_larger():
    assert buckets_of(TIMINGS) == [Bucket("n=10", 10, 10), Bucket("a=2,b=50 | a=50,b=2", 100, 100),
                                   Bucket("n=1000", 1000, None)]


def test_speedups_per_bucket_need_every_shape_set_of_it():
    speedups = speedups_by_program(TIMINGS)
    one = {s.bucket.numel: (s.speedup, s.speedup_noise) for s in speedups[1]}
    assert one[10] == (2.0, 0.01) and one[100] == (pytest.approx(2.0), 0.05)  # geometric mean, largest noise
    assert [s.bucket.numel for s in speedups[2]] == [10, 1000]  # one of the two shape sets of 100 untimed
    assert [s.bucket.numel for s in speedups[3]] == [1000]


def test_best_per_bucket_ranks_and_respects_the_floor():
    best = best_per_bucket(speedups_by_program(TIMINGS), k=2)
    assert {b.numel: [p for p, _ in ranked] for b, ranked in best.items()} == {10: [1, 2], 100: [1], 1000: [2, 3]}
    floor = best_per_bucket(speedups_by_program(TIMINGS), k=1, min_speedup=2.5)
    assert {b.numel: [p for p, _ in ranked] for b, ranked in floor.items()} == {1000: [2]}  # ties: lower id

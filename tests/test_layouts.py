import numpy as np
import pytest

from archive import Archive, ArchiveError
from evo.core.descriptors import by_names, describe
from evo.core.layouts import CVT, Grid, draw_centroids, nearest_centroid
from tests.test_archive import add, ok, src

GRID = Grid(by_names(["block_size", "num_warps"]))
CONTINUOUS = by_names(["block_size", "num_warps"], continuous=True)


def test_grid_neighbours_and_distance():
    key = "block_size=16|num_warps=4"
    assert sorted(GRID.neighbours(key)) == sorted(["block_size=32|num_warps=4", "block_size=16|num_warps=2",
                                                   "block_size=16|num_warps=8"])
    assert GRID.distance(key, "block_size=64|num_warps=1") == 4 and GRID.distance(key, key) == 0


def test_centroids_are_seeded_and_fill_the_cube():
    a, b = draw_centroids(32, 2, seed=1), draw_centroids(32, 2, seed=1)
    assert np.array_equal(a, b) and not np.array_equal(a, draw_centroids(32, 2, seed=2))
    assert a.shape == (32, 2) and a.min() >= 0 and a.max() <= 1
    assert len(set(nearest_centroid(np.random.default_rng(0).random((2000, 2)), a))) == 32  # no empty cell


def test_nearest_centroid_matches_brute_force():
    rng = np.random.default_rng(3)
    points, centroids = rng.random((5000, 3)), rng.random((40, 3))
    brute = np.argmin(((points[:, None, :] - centroids[None]) ** 2).sum(axis=2), axis=1)
    assert np.array_equal(nearest_centroid(points, centroids, chunk=777), brute)


def test_continuous_descriptors_and_cvt_keys():
    cvt = CVT(CONTINUOUS, np.array([[0.0, 0.0], [1.0, 1.0], [0.5, 0.4]]))
    values = describe(src(8192, 32), CONTINUOUS)
    assert values == {"block_size": "1.0000", "num_warps": "1.0000"}
    assert cvt.key(values) == "cvt=1" and cvt.key(describe(src(16, 1), CONTINUOUS)) == "cvt=0"
    assert cvt.neighbours("cvt=0") == ["cvt=2", "cvt=1"] and cvt.size == 3
    assert cvt.distance("cvt=0", "cvt=1") == pytest.approx(2 ** 0.5)


def test_a_cvt_archive_keeps_its_centroids_across_resumes(db_url):
    url = db_url
    first = Archive(url, descriptors=CONTINUOUS, cvt_cells=16, seed=5)
    centroids = first.layout.centroids.copy()
    p = add(first, src(256, 4))
    first.record_evaluation(p, ok(1.5))
    assert describe(src(256, 4), CONTINUOUS) == {"block_size": "0.4444", "num_warps": "0.4000"}
    key = first.layout.key({"block_size": "0.4444", "num_warps": "0.4000"})
    assert [e.id for e in first.elites("t")] == [p.id] and first.get(p.id).descriptors == {"cvt": key[4:]}
    assert first.qd_figures("t")["coverage"] == 1 / 16
    first.close()
    again = Archive(url, descriptors=CONTINUOUS, cvt_cells=16, seed=99)  # the stored centroids win
    assert np.array_equal(again.layout.centroids, centroids) and again.stats("t")["cells"] == 1
    again.close()
    with pytest.raises(ArchiveError, match="same archive.cvt_cells"):
        Archive(url, descriptors=CONTINUOUS, cvt_cells=8)
    with pytest.raises(ArchiveError, match="same archive.cvt_cells"):
        Archive(url)  # a grid


def test_a_cvt_needs_continuous_descriptors_and_they_need_a_cvt(tmp_path):
    with pytest.raises(ArchiveError, match="continuous"):
        Archive(f"sqlite:///{tmp_path / 'a.db'}", cvt_cells=4)
    with pytest.raises(ArchiveError, match="need a CVT"):
        Archive(f"sqlite:///{tmp_path / 'b.db'}", descriptors=CONTINUOUS)

"""Cell layouts of a MAP-Elites archive: which cell a program's descriptor values fall in.

- :class:`Grid`: one cell per combination of descriptor bins (the default);
- :class:`CVT`: a centroidal Voronoi tessellation of the continuous descriptor
  space, one cell per centroid, for continuous descriptors (``archive.cvt_cells``).

Both tell selection strategies which cells are adjacent (``neighbours``) and
how far apart two cells are (``distance``).  Cell keys are ``name=value|...``
strings (:func:`~evo.core.descriptors.cell_key`); a CVT cell's key is ``cvt=<index>``.
"""
from __future__ import annotations

import abc

import numpy as np

from evo.core.descriptors import NONE, cell_key, grid_size, parse_cell_key

CVT_KEY = "cvt"


class Layout(abc.ABC):
    def __init__(self, descriptors):
        self.descriptors = tuple(descriptors)

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """How many cells there are (coverage is filled cells over this)."""

    @abc.abstractmethod
    def key(self, values: dict[str, str]) -> str:
        """The cell of a program with these (complete) descriptor values."""

    @abc.abstractmethod
    def neighbours(self, key: str) -> list[str]:
        """The cells adjacent to ``key``."""

    @abc.abstractmethod
    def distance(self, a: str, b: str) -> float:
        """How far apart two cells are (0 for the same cell)."""


class Grid(Layout):
    """A cell per combination of bins; neighbours are one bin away along one descriptor."""

    @property
    def size(self) -> int:
        return grid_size(self.descriptors)

    def key(self, values):
        return cell_key(values)

    def _indexes(self, key: str) -> list[int | None]:
        values = parse_cell_key(key)
        return [d.bins.index(values[d.name]) if values.get(d.name) in d.bins else None for d in self.descriptors]

    def neighbours(self, key):
        values, out = parse_cell_key(key), []
        for d in self.descriptors:
            if values.get(d.name) not in d.bins:
                continue
            i = d.bins.index(values[d.name])
            out += [cell_key(dict(values, **{d.name: d.bins[j]})) for j in (i - 1, i + 1) if 0 <= j < len(d.bins)]
        return out

    def distance(self, a, b):
        """Bins apart, summed over descriptors (an unknown value counts as a whole axis)."""
        return float(sum(len(d.bins) if i is None or j is None else abs(i - j)
                         for d, i, j in zip(self.descriptors, self._indexes(a), self._indexes(b))))


def draw_centroids(cells: int, dimensions: int, seed: int, samples_per_cell: int = 20,
                   iterations: int = 20) -> np.ndarray:
    """``cells`` centroids in the unit cube: k-means (Lloyd) over uniform samples from a seeded RNG."""
    if cells < 1 or dimensions < 1:
        raise ValueError("a CVT needs at least one cell and one descriptor")
    rng = np.random.default_rng([seed, 7_919])
    points = rng.random((max(cells * samples_per_cell, 1_000), dimensions))
    centroids = points[rng.choice(len(points), size=cells, replace=False)].copy()
    for _ in range(iterations):
        nearest = nearest_centroid(points, centroids)
        counts = np.bincount(nearest, minlength=cells)
        for axis in range(dimensions):
            sums = np.bincount(nearest, weights=points[:, axis], minlength=cells)
            centroids[:, axis] = np.where(counts > 0, sums / np.maximum(counts, 1), centroids[:, axis])
    return centroids


def nearest_centroid(points: np.ndarray, centroids: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Index of the nearest centroid of each point (rows), in chunks to bound memory."""
    out = np.empty(len(points), dtype=np.int64)
    squared = (centroids ** 2).sum(axis=1)
    for start in range(0, len(points), chunk):
        block = points[start:start + chunk]
        out[start:start + chunk] = np.argmin(squared - 2.0 * block @ centroids.T, axis=1)
    return out


class CVT(Layout):
    """One cell per centroid; a program's cell is the centroid nearest to its descriptor values.

    Values are positions in [0, 1] (continuous descriptors' labels); an
    unknown value (``none``) is placed at 0.  Neighbours are the ``2 * d``
    nearest other centroids.
    """

    def __init__(self, descriptors, centroids: np.ndarray):
        super().__init__(descriptors)
        self.centroids = np.asarray(centroids, dtype=float)
        if self.centroids.ndim != 2 or self.centroids.shape[1] != len(self.descriptors):
            raise ValueError(f"{len(self.descriptors)} descriptors need centroids of that many coordinates, "
                             f"not an array of shape {self.centroids.shape}")
        self._near: dict[int, list[str]] = {}

    @property
    def size(self) -> int:
        return len(self.centroids)

    def key(self, values):
        point = np.array([[0.0 if values.get(d.name, NONE) == NONE else float(values[d.name])
                           for d in self.descriptors]])
        return f"{CVT_KEY}={int(nearest_centroid(point, self.centroids)[0])}"

    @staticmethod
    def index(key: str) -> int | None:
        value = parse_cell_key(key).get(CVT_KEY)
        return int(value) if value is not None and value.isdigit() else None

    def neighbours(self, key):
        i = self.index(key)
        if i is None or i >= self.size:
            return []
        if i not in self._near:
            gaps = np.linalg.norm(self.centroids - self.centroids[i], axis=1)
            count = min(2 * len(self.descriptors), self.size - 1)
            self._near[i] = [f"{CVT_KEY}={int(j)}" for j in np.argsort(gaps, kind="stable")[1:count + 1]]
        return self._near[i]

    def distance(self, a, b):
        i, j = self.index(a), self.index(b)
        if i is None or j is None or max(i, j) >= self.size:
            return float(np.sqrt(len(self.descriptors)))  # the cube's diagonal: as far as it gets
        return float(np.linalg.norm(self.centroids[i] - self.centroids[j]))

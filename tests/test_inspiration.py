import numpy as np
import pytest

from evo.core.descriptors import by_names
from evo.core.inspiration import Best, BestThenRandom, Diverse, Neighbours, RandomElites
from evo.core.layouts import Grid
from evo.core.selection import EliteCell

GRID = Grid(by_names(["block_size", "num_warps"]))
PARENT = "block_size=256|num_warps=4"


def cell(pid, block, warps, fitness):
    return EliteCell(key=f"block_size={block}|num_warps={warps}", program_id=pid, fitness=fitness)


ELITES = [cell(1, 512, 4, 1.0), cell(2, 128, 4, 3.0), cell(3, 4096, 32, 0.5), cell(4, 16, 1, 2.0),
          cell(5, 256, 8, 1.5)]


def ids(strategy, k=2, parent=PARENT, seed=0):
    return [e.program_id for e in strategy.pick(ELITES, parent, k, np.random.default_rng(seed), GRID)]


def test_best_and_best_then_random():
    assert ids(Best()) == [2, 4]
    picks = {tuple(ids(BestThenRandom(), seed=s)) for s in range(20)}
    assert all(p[0] == 2 and len(p) == 2 for p in picks) and len(picks) > 1
    assert ids(BestThenRandom(), k=10) == [2, 4, 5, 1, 3]


def test_random_elites_are_distinct():
    for seed in range(10):
        picks = ids(RandomElites(), k=3, seed=seed)
        assert len(set(picks)) == 3


def test_neighbours_and_diverse_use_cell_distance():
    # From block 256 / warps 4: blocks 512, 128 and warps 8 are one bin away; 16/1 and 4096/32 are far.
    assert set(ids(Neighbours(), k=3)) == {1, 2, 5}
    assert set(ids(Diverse(), k=2)) == {3, 4}
    assert set(ids(Diverse(), k=2, parent=None)) <= {1, 2, 3, 4, 5}  # no parent cell: random


@pytest.mark.parametrize("strategy", [Best(), BestThenRandom(), RandomElites(), Diverse(), Neighbours()])
def test_every_strategy_respects_k(strategy):
    assert ids(strategy, k=0) == [] and len(ids(strategy, k=3)) == 3 and len(ids(strategy, k=9)) == 5
    assert strategy.pick([], PARENT, 2, np.random.default_rng(0), GRID) == []

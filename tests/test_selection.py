import numpy as np
import pytest

from evo.core.descriptors import by_names
from evo.core.layouts import Grid
from evo.core.selection import Curiosity, EliteCell, FitnessProportional, Tournament, Uniform, empty_neighbours

GRID = Grid(by_names(["block_size", "num_warps"]))


def cell(pid, block, warps, fitness, children=0):
    return EliteCell(key=f"block_size={block}|num_warps={warps}", program_id=pid, fitness=fitness,
                     children=children)


ELITES = [cell(1, 256, 4, 1.0, children=20), cell(2, 512, 4, 2.0), cell(3, 1024, 4, 1.5, children=0)]
OCCUPIED = {e.key for e in ELITES}


def frequencies(strategy, elites=ELITES, draws=3000):
    rng = np.random.default_rng(0)
    picks = [strategy.pick(elites, rng, GRID, {e.key for e in elites}).program_id for _ in range(draws)]
    return {pid: picks.count(pid) / draws for pid in {e.program_id for e in elites}}


def test_uniform():
    f = frequencies(Uniform())
    assert all(abs(v - 1 / 3) < 0.05 for v in f.values())


def test_fitness_proportional_prefers_fast_elites_with_few_children():
    f = frequencies(FitnessProportional(sharpness=2, novelty=1))
    # weights: 1/21, 4/1, 2.25/1
    assert f[2] > f[3] > f[1] and f[1] < 0.03


def test_tournament_picks_the_fittest_of_the_draw():
    assert frequencies(Tournament(size=3)) == {1: 0.0, 2: 1.0, 3: 0.0}
    assert frequencies(Tournament(size=1))[1] > 0.25


def test_curiosity_counts_empty_neighbours():
    # block 256: neighbours 128 and 512 (occupied) along block; 2 and 8 along warps -> 3 empty
    assert empty_neighbours(ELITES[0], GRID, OCCUPIED) == 3
    assert empty_neighbours(ELITES[1], GRID, OCCUPIED) == 2
    # One elite in open space (4 empty neighbours), six in a filled row (1 or 2 each).
    lonely = [cell(1, 256, 4, 1.0), *(cell(10 + i, 16, w, 1.0) for i, w in enumerate((1, 2, 4, 8, 16, 32)))]
    f = frequencies(Curiosity(strength=5.0), lonely)
    assert f[1] > max(v for k, v in f.items() if k != 1)


@pytest.mark.parametrize("bad", [lambda: FitnessProportional(sharpness=-1), lambda: Tournament(size=0),
                                 lambda: Curiosity(strength=-1)])
def test_bad_parameters(bad):
    with pytest.raises(ValueError):
        bad()

"""Meta-prompt evolution's pool: seed files, Thompson choice, breeding, the bounded pool, its state."""
import numpy as np
import pytest

from evo.core.errors import ConfigError
from operators.meta_prompt import DEFAULT_FRAGMENTS, PromptEvolution, read_fragments


def write(tmp_path, text):
    path = tmp_path / "fragments.txt"
    path.write_text(text)
    return str(path)


def test_seed_fragments_are_read_from_a_text_file(tmp_path):
    path = write(tmp_path, "# a comment\nUse wide loads.\nMask the edges.\n\n\nFuse the steps.\n")
    assert read_fragments(path) == [["Use wide loads.", "Mask the edges."], ["Fuse the steps."]]
    assert len(read_fragments(DEFAULT_FRAGMENTS)) >= 5


@pytest.mark.parametrize("text, message", [
    ("Only one fragment.\n", "at least 2"),
    ("x" * 500 + "\n\nshort\n", "at most 400"),
])
def test_bad_seed_files_are_config_errors(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        PromptEvolution(fragments=write(tmp_path, text))
    with pytest.raises(ConfigError, match="cannot be read"):
        PromptEvolution(fragments=str(tmp_path / "missing.txt"))
    with pytest.raises(ConfigError, match="below the"):
        PromptEvolution(max_fragments=2)


def test_the_pool_learns_which_advice_pays_and_stays_bounded():
    pool = PromptEvolution(evolve_every=4, max_fragments=8, min_trials=3)
    rng = np.random.default_rng(1)
    chosen = []
    for _ in range(300):
        fragment = pool.choose(rng)
        fuses = any(s.startswith("Fuse every") for s in fragment.sentences)
        chosen.append(fuses)
        pool.reward(fragment.id, fuses and rng.random() < 0.5, rng)
        assert len(pool.fragments) <= 8
    assert sum(chosen[-100:]) > sum(chosen[:100]) and sum(chosen[-100:]) > 70
    best = pool.table()[0]
    assert "Fuse every" in best["text"] and best["improvements"] > 5
    bred = [f for f in pool.fragments if f.parents]
    assert bred and all(1 <= len(f.sentences) <= pool.max_sentences for f in bred)
    assert all(s in pool.library for f in pool.fragments for s in f.sentences)


def test_a_full_pool_never_drops_its_best_fragment():
    pool = PromptEvolution(evolve_every=1, max_fragments=6, min_trials=3)  # the six seeds fill it
    rng = np.random.default_rng(0)
    best = pool.fragments[2]
    for _ in range(3):
        pool.reward(best.id, True, rng)  # each reward breeds; nothing else has been tried
    assert best in pool.fragments and len(pool.fragments) <= 6


def test_the_state_round_trips_through_json():
    import json

    pool = PromptEvolution(evolve_every=2)
    rng = np.random.default_rng(3)
    for _ in range(20):
        pool.reward(pool.choose(rng).id, bool(rng.random() < 0.3), rng)
    again = PromptEvolution(evolve_every=2)
    again.restore(json.loads(json.dumps(pool.state())))
    assert again.state() == pool.state() and again.table() == pool.table()
    assert pool.reward(10_000, True, rng) is None  # a fragment pruned while its child was under way

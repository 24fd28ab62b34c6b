"""experiments/dot_precision_probe.py reads a run's seeds: the twin as it is, the exact seed with its
convolutions switched to the channels-last gather and the split copy off."""
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "experiments"))

from dot_precision_probe import archive_problems  # noqa: E402


def test_a_runs_first_seed_is_its_twin_and_its_last_the_exact_one_switched(tmp_path):
    db = sqlite3.connect(tmp_path / "archive.db")
    db.execute("create table programs (id integer, task text, operator text, source text)")
    twin = "K0_USE_CHANNELS_LAST = 1\nK0_USE_SPLIT_TF32 = 1\n"
    exact = "K0_USE_CHANNELS_LAST = 0\nK0_USE_SPLIT_TF32 = 0\nK1_USE_SPLIT_TF32 = 1\n"
    db.executemany("insert into programs values (?, ?, ?, ?)", [
        (1, "conv", "seed", twin), (2, "conv", "seed", exact), (3, "conv", "constants", "x = 1\n"),
        (4, "other", "seed", "y = 2\n")])
    db.commit()
    (tmp_path / "conv.py").write_text("# the problem\n")
    (problem,) = archive_problems(str(tmp_path / "archive.db"), str(tmp_path), "^conv$")
    assert problem["name"] == "conv" and problem["seed"] == twin and problem["source"] == "# the problem\n"
    assert problem["exact"] == "K0_USE_CHANNELS_LAST = 1\nK0_USE_SPLIT_TF32 = 0\nK1_USE_SPLIT_TF32 = 0\n"

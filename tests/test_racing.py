"""Racing (evaluator.race): a child clearly slower than its parent keeps a short timing round; the
run loop gives each child its parent's speedup as the bar.  On the CPU through the interpreter."""
import dataclasses

import pytest

from evaluator import Evaluator, EvaluatorSettings, Status
from evaluator.evaluator import TimingSettings
from tests.support.candidates import TASK, candidate
from operators.base import Proposal
from tests.test_rng_resume import FakeBackend, run


@pytest.fixture(scope="module")
def racing():
    # Enough repetitions on the CPU for a short round of 3 to be shorter than the full one.
    settings = EvaluatorSettings(device="cpu", timeout_s=60, race_reps=3,
                                 cpu_timing=TimingSettings(warmup=1, reps=12, budget_s=5.0, batch=1))
    ev = Evaluator(settings, "cpu")
    yield ev
    ev.close()


@pytest.mark.slow
def test_a_child_far_below_its_parent_keeps_the_short_round(racing):
    result = racing.evaluate("double", TASK, candidate(), race_bar=1e9)
    assert result.status == Status.CORRECT
    assert result.extra["timing_round"] == {"round": "short", "reps": 3, "bar": 1e9}
    assert result.extra["phases"]["race_s"] > 0 and "interleaved_s" not in result.extra["phases"]
    assert result.speedup and result.extra["timed_checks"]["outputs_checked"]  # still checked


def test_a_child_that_could_matter_is_timed_in_full(racing):
    result = racing.evaluate("double", TASK, candidate("_v = 1"), race_bar=1e-9)
    assert result.status == Status.CORRECT
    assert result.extra["timing_round"]["round"] == "full"
    assert result.extra["timing_round"]["from_short"] == 3  # the short round's samples carried on
    assert result.extra["phases"]["interleaved_s"] > 0
    verified = result.extra["timed_checks"]
    assert verified["outputs_checked"] and len(verified["kept_checked"]) == 3 and verified["launches"] == [1, 1]


def test_without_a_bar_there_is_no_race(racing):
    result = racing.evaluate("double", TASK, candidate("_v = 2"))
    assert "timing_round" not in result.extra and "race_s" not in result.extra["phases"]


def test_racing_settings_are_checked():
    with pytest.raises(ValueError, match="race"):
        EvaluatorSettings(race_reps=1)
    assert dataclasses.replace(EvaluatorSettings(), race=False).race is False


class RecordingBackend(FakeBackend):
    races = True

    def __init__(self):
        super().__init__()
        self.bars = []

    def propose(self, island, context):
        self.proposals += 1
        return self._done(Proposal("fake", f"{context.parent.source}\n_child = {self.proposals}\n"))

    def evaluate(self, slot, task_name, task_source, source, race_bar=None):
        self.bars.append(race_bar)
        return super().evaluate(slot, task_name, task_source, source)


def test_the_run_loop_races_children_against_their_parents_speedup(tmp_path, builtin_tasks):
    backend = RecordingBackend()
    run(f"sqlite:///{tmp_path / 'a.db'}", builtin_tasks["gelu"], 4, backend, resume_count=0)
    assert backend.bars[0] is None  # the seed has no parent
    children = backend.bars[1:]
    assert len(children) == 4 and all(bar is not None and bar > 0 for bar in children)


@pytest.mark.slow
def test_the_archive_keeps_how_each_child_was_timed_and_status_says_it(racing, tmp_path):
    from archive import Archive
    from archive.queries import ArchiveReader
    from evo.views.summary import racing_line

    url = f"sqlite:///{tmp_path / 'a.db'}"
    archive = Archive(url)
    for n, bar in enumerate((1e9, 1e-9, None)):  # kept short, timed in full, not raced
        program = archive.add_program(task="double", island=0, generation=1, operator="constants",
                                      source=candidate(f"_r = {n}"))
        archive.record_evaluation(program, racing.evaluate("double", TASK, program.source, race_bar=bar))
    archive.close()
    reader = ArchiveReader(url=url)
    counts = reader.timing_rounds()
    reader.close()
    assert counts == {"short": 1, "full": 1, "from_short": 1}
    assert racing_line(counts) == ("racing: 2 children raced against their parent; 1 clearly slower kept a short "
                                   "timing round, 1 timed in full (1 going on from their short round)")
    assert racing_line({"short": 0, "full": 0, "from_short": 0}) is None

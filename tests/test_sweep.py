"""The tuning sweep: a new elite's tunables each moved one step, scheduled by the run loop."""
import numpy as np
import pytest

from archive import Archive
from evaluator import Evaluator, EvaluatorSettings
from evo.loop.controller import Controller
from evo.core.kernel_source import find_tunables
from evo.core.program import Program
from evo.views.progress import RunEvents
from evo.loop.run_settings import RunSettings
from islands import Island, LocalBackend, MigrationSettings
from operators import Context, TunableConstantMutation
from operators.sweep import TuningSweep, neighbours

SOURCE = "BLOCK_SIZE = 256\nNUM_WARPS = 1\nNUM_STAGES = 6\nROWS_PER_PROGRAM = 4\n"


def test_the_neighbours_are_every_one_step_move_round_robin_over_the_tunables():
    found = [note for note, _ in neighbours(SOURCE)]
    # steps down first (warps 1 has none), then up (stages 6 has none)
    assert found == ["sweep: BLOCK_SIZE 256->128", "sweep: NUM_STAGES 6->5", "sweep: ROWS_PER_PROGRAM 4->2",
                     "sweep: BLOCK_SIZE 256->512", "sweep: NUM_WARPS 1->2", "sweep: ROWS_PER_PROGRAM 4->8"]
    for _, child in neighbours(SOURCE):
        before = {t.name: t.value for t in find_tunables(SOURCE)}
        after = {t.name: t.value for t in find_tunables(child)}
        assert sum(before[k] != after[k] for k in before) == 1


def test_the_sweep_operator_makes_the_attempt_th_neighbour_up_to_its_bound():
    parent = Program(id=1, task="t", island=0, generation=0, operator="seed", source=SOURCE)
    sweep = TuningSweep(max_children=4)
    made = [sweep.propose(Context("t", "", parent, sweep=True, attempt=i), np.random.default_rng(0))
            for i in range(6)]
    assert [p.note for p in made[:4]] == [note for note, _ in neighbours(SOURCE)[:4]]
    assert made[4].source is None and made[5].source is None
    with pytest.raises(ValueError):
        TuningSweep(max_children=-1)


def test_an_island_runs_the_sweep_only_when_the_run_loop_asks():
    island = Island(0, [TunableConstantMutation(), TuningSweep()], [1.0, 0.0], seed=1)
    parent = Program(id=1, task="t", island=0, generation=0, operator="seed", source=SOURCE)
    assert {island.propose(Context("t", "", parent)).operator for _ in range(10)} == {"constants"}
    assert island.propose(Context("t", "", parent, sweep=True, attempt=1)).note == "sweep: NUM_STAGES 6->5"
    plain = Island(0, [TunableConstantMutation()], [1.0], seed=1)
    assert plain.propose(Context("t", "", parent, sweep=True)).note == "no sweep operator is configured"


@pytest.mark.slow
def test_a_new_elite_is_swept_and_its_sweep_children_start_no_sweep(tmp_path, builtin_tasks):
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    settings = RunSettings(dir=str(tmp_path), seed=3, budget_evaluations=6, sweep_children=3)
    islands = [Island(0, [TunableConstantMutation(), TuningSweep(max_children=3)], [1.0, 0.0], seed=3)]
    backend = LocalBackend(islands, lambda i: Evaluator(EvaluatorSettings(device="cpu", timeout_s=60), "cpu"), 1)
    events = RunEvents(tmp_path, 6, show=False)
    controller = Controller(settings=settings, tasks=[builtin_tasks["gelu"]], archive=archive, backend=backend,
                            migration=MigrationSettings(interval=0, migrants=1), events=events)
    try:
        controller.run()
    finally:
        backend.close()
        events.close()
    from tests.test_controller import programs as rows

    programs = [archive.get(row.id) for row in rows(archive)]
    seed = next(p for p in programs if p.operator == "seed")
    swept = [p for p in programs if p.operator == "sweep"]
    # The seed became the first elite: its first three neighbours came next, as its children.
    assert [p.parent_ids for p in swept[:3]] == [(seed.id,)] * 3
    assert {p.source for p in swept[:3]} == {child for _, child in neighbours(seed.source)[:3]}
    for p in swept:  # every sweep child is a child of an elite that was not itself a sweep child
        assert archive.get(p.parent_ids[0]).operator != "sweep"


def test_only_a_tasks_fastest_elite_is_swept_and_a_sweep_child_only_raises_the_bar():
    from evo.loop.feedback import Feedback

    feedback = Feedback(None, np.random.default_rng(0), lambda *a, **k: None, 5, sweep_children=2)

    def elite(pid, speedup, operator="constants"):
        feedback.elite(Program(id=pid, task="t", island=0, generation=1, operator=operator, source=SOURCE), speedup)

    elite(1, 1.0)
    elite(2, 0.5)  # a slower kernel in a new cell: not tuned
    elite(3, 2.0, operator="sweep")  # faster, but from a sweep: no sweep of its own
    elite(4, 1.5)  # faster than the first, not than the sweep child's
    elite(5, 2.5)
    assert [(p.id, i) for p, i in feedback.sweeps] == [(1, 0), (1, 1), (5, 0), (5, 1)]
    # One proposal in two at most, and only while the elite's island has room.
    taken = [feedback.next_sweep([0]) for _ in range(4)]
    assert [(p.id, i) if p else None for p, i in ((t or (None, None)) for t in taken)] == [
        (1, 0), None, (1, 1), None]
    assert feedback.next_sweep([1]) is None and len(feedback.sweeps) == 2

"""Migration between islands: topologies, copy or move, provenance, reseeding of a stagnant island."""
import collections
import json

import pytest
from sqlalchemy import create_engine, text

from archive import Archive
from evaluator import EvalResult, Status
from evo.loop.controller import Controller
from evo.loop.run_settings import RunSettings
from islands import FullyConnected, MigrationSettings, RandomPartner, Ring, Stagnation, round_rng
from islands.stagnation import RESEEDS_META
from operators.base import Proposal
from tests.test_archive import add, ok, src
from tests.test_rng_resume import FakeBackend, Killed, run


@pytest.fixture
def archive(db_url):
    a = Archive(db_url)
    yield a
    a.close()


def migrations(archive):
    with archive.engine.connect() as c:
        return [tuple(r) for r in c.execute(text(
            "select program_id, src_island, dst_island, kind from migrations order by id"))]


def elite(archive, block, speedup, island, task="t"):
    program = add(archive, src(block, tag=f"{island}-{speedup}"), island=island, task=task)
    archive.record_evaluation(program, ok(speedup))
    return program


# -- topologies ---------------------------------------------------------------
def test_ring_and_fully_connected_pairs():
    rng = round_rng(0, 16)
    assert Ring().pairs(3, rng) == [(0, 1), (1, 2), (2, 0)]
    assert FullyConnected().pairs(3, rng) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    for topology in (Ring(), FullyConnected(), RandomPartner()):
        assert topology.pairs(1, rng) == []


def test_random_partners_are_other_islands_reproducible_per_seed_and_ordinal():
    topology = RandomPartner()
    rounds = [topology.pairs(6, round_rng(7, ordinal)) for ordinal in range(16, 16 * 9, 16)]
    for pairs in rounds:
        assert [src for src, _ in pairs] == list(range(6)) and all(src != dst for src, dst in pairs)
    assert rounds[0] == topology.pairs(6, round_rng(7, 16))  # a resumed run draws the same round
    assert len({tuple(pairs) for pairs in rounds}) > 1  # rounds differ from each other
    assert topology.pairs(6, round_rng(8, 16)) != rounds[0] or topology.pairs(6, round_rng(9, 16)) != rounds[0]
    assert {dst for pairs in rounds for _, dst in pairs} == set(range(6))


@pytest.mark.parametrize("bad, message", [(dict(mode="swap"), "copy or move"), (dict(reseed_after=-1), ">= 0"),
                                          (dict(topology="ring"), "must be a Topology")])
def test_bad_settings_say_how_to_fix_them(bad, message):
    with pytest.raises(ValueError, match=message):
        MigrationSettings(**bad)


# -- copy, move and provenance in the archive ------------------------------------
def test_copy_keeps_the_elite_on_its_island(archive):
    a = elite(archive, 256, 3.0, island=0)
    assert archive.migrate("t", [(0, 1)], count=1) == 1
    assert [p.id for p in archive.elites("t", 0)] == [a.id] == [p.id for p in archive.elites("t", 1)]
    assert migrations(archive) == [(a.id, 0, 1, "copy")]


def test_move_empties_the_source_cell_only_when_the_destination_accepts(archive):
    a = elite(archive, 256, 3.0, island=0)
    b = elite(archive, 512, 1.0, island=0)
    holder = elite(archive, 256, 5.0, island=1)  # island 1's cell of a is better: a is refused
    assert archive.migrate("t", [(0, 1)], count=2, move=True) == 1
    assert {p.id for p in archive.elites("t", 0)} == {a.id}  # a stayed, b left
    assert {p.id for p in archive.elites("t", 1)} == {holder.id, b.id}
    assert migrations(archive) == [(b.id, 0, 1, "move")]
    archive.close()  # the emptied cell is gone from the database, not only from the cache
    reopened = Archive(archive.url)
    assert {p.id for p in reopened.elites("t", 0)} == {a.id}
    reopened.close()


def test_a_round_sends_what_each_island_held_when_it_began(archive):
    a = elite(archive, 256, 3.0, island=0)
    b = elite(archive, 256, 2.0, island=1)
    c = elite(archive, 256, 1.0, island=2)
    # Ring with move: a replaces b on island 1 and leaves island 0; b (sent as the round began) replaces
    # c on island 2, its cell on island 1 already holds a; c fills island 0's emptied cell: a rotation.
    assert archive.migrate("t", Ring().pairs(3, None), count=1, move=True) == 3
    assert [[p.id for p in archive.elites("t", i)] for i in range(3)] == [[c.id], [a.id], [b.id]]
    assert migrations(archive) == [(a.id, 0, 1, "move"), (b.id, 1, 2, "move"), (c.id, 2, 0, "move")]


def test_fully_connected_round_fills_one_cell_from_two_islands_in_one_transaction(archive):
    a = elite(archive, 256, 3.0, island=0)
    b = elite(archive, 256, 4.0, island=1)
    # a is refused by island 1 (b is better) and enters 2; b enters 0, then replaces a on 2.
    assert archive.migrate("t", FullyConnected().pairs(3, None), count=1) == 3
    assert [p.id for p in archive.elites("t", 2)] == [b.id] and [p.id for p in archive.elites("t", 0)] == [b.id]
    assert migrations(archive) == [(a.id, 0, 2, "copy"), (b.id, 1, 0, "copy"), (b.id, 1, 2, "copy")]
    assert archive.migrate("t", FullyConnected().pairs(3, None), count=1) == 0


def test_reseed_replaces_an_islands_cells_with_the_others_best(archive):
    stale = elite(archive, 1024, 1.1, island=0)
    a = elite(archive, 256, 3.0, island=1)
    b = elite(archive, 256, 2.0, island=2)
    c = elite(archive, 512, 1.5, island=2)
    assert archive.reseed("t", 0, meta={"k": "v"}) == 2
    assert {p.id for p in archive.elites("t", 0)} == {a.id, c.id}
    assert stale.id not in {p.id for p in archive.elites("t")}
    assert sorted(migrations(archive)) == sorted([(a.id, 1, 0, "reseed"), (c.id, 2, 0, "reseed")])
    assert archive.get_meta("k") == "v" and {p.id for p in archive.elites("t", 2)} == {b.id, c.id}


def test_reseed_without_other_elites_changes_nothing(archive):
    only = elite(archive, 256, 1.0, island=0)
    assert archive.reseed("t", 0, meta={"k": "v"}) == 0
    assert [p.id for p in archive.elites("t", 0)] == [only.id] and archive.get_meta("k") is None


def test_evaluation_outcomes_list_speedups_of_correct_programs_in_order(archive):
    seed = add(archive, src(256), operator="seed")
    archive.record_evaluation(seed, ok(1.0))
    child = add(archive, src(512), island=1)
    archive.record_evaluation(child, EvalResult(status=Status.INCORRECT, speedup=9.0))
    assert archive.evaluation_outcomes(["t"]) == [("t", 0, True, 1.0, None), ("t", 1, False, None, None)]
    assert archive.evaluation_outcomes(["other"]) == []


# -- stagnation -----------------------------------------------------------------------
def test_an_island_is_stagnant_after_n_evaluations_without_a_new_best():
    s = Stagnation(after=3)
    s.seeded("t", 1.0)
    assert not s.evaluated("t", 0, 1.5, 0.0)  # a new best
    assert not s.evaluated("t", 0, 1.4, 0.0)
    assert not s.evaluated("t", 1, 0.9, 0.0)  # another island counts apart
    assert not s.evaluated("t", 0, None, None) and s.stagnant() == []
    assert s.evaluated("t", 0, 1.52, 0.05)  # faster, but within its noise: the 3rd without a new best
    assert s.stagnant() == [("t", 0)] and s.evaluations_since_best("t", 0) == 3
    meta = s.reseed_meta("t", 0, best=2.0)
    s.reseeded("t", 0, meta)
    assert s.stagnant() == [] and json.loads(meta[RESEEDS_META]) == {"t": {"0": [4, 2.0]}}
    assert not s.evaluated("t", 0, 1.9, 0.0) and not s.evaluated("t", 0, 1.9, 0.0)  # below the reseeded best
    assert s.evaluated("t", 0, 1.9, 0.0)
    assert not Stagnation(after=0).evaluated("t", 0, None, None)


def test_stagnation_replayed_from_the_archive_matches_the_live_one():
    outcomes = [("t", 0, True, 1.0, None)] + [("t", i % 2, False, 1.0 + (i % 5) / 10, 0.0) for i in range(23)]
    live = Stagnation(after=4)
    reseed_meta = None
    for task, island, is_seed, speedup, noise in outcomes:
        if is_seed:
            live.seeded(task, speedup)
        elif live.evaluated(task, island, speedup, noise):
            reseed_meta = live.reseed_meta(task, island, best=5.0)
            live.reseeded(task, island, reseed_meta)
    assert reseed_meta is not None
    replayed = Stagnation.replay(4, outcomes, reseed_meta[RESEEDS_META])
    assert replayed._islands == live._islands and replayed.reseeds == live.reseeds
    assert Stagnation.replay(4, outcomes, None)._islands != live._islands  # the reseeds matter


# -- the run loop ---------------------------------------------------------------------------
class IslandsBackend(FakeBackend):
    """FakeBackend's synchronous answers over several islands; a child's speedup can be fixed."""

    def __init__(self, islands, kill_at_proposal=None, speedup=None):
        super().__init__(kill_at_proposal)
        self.island_count, self.speedup = islands, speedup

    def propose(self, island, context):
        self.proposals += 1
        if self.proposals == self.kill_at:
            raise Killed()
        return self._done(Proposal("fake", f"{context.parent.source}CHILD_{context.sequence} = {island}\n"))

    def evaluate(self, slot, task_name, task_source, source):
        if self.speedup is not None and "CHILD_" in source:
            return self._done(EvalResult(status=Status.CORRECT, speedup=self.speedup))
        return super().evaluate(slot, task_name, task_source, source)


def run_loop(url, task, budget, backend, migration, resume_count=0, events=None):
    """A run of ``test_rng_resume.run`` (seed 7); returns its events."""
    events = [] if events is None else events
    run(url, task, budget, backend, resume_count, migration,
        events=lambda kind, **fields: events.append((kind, fields)))
    return events


def migration_rows(url):
    engine = create_engine(url)
    with engine.connect() as c:
        rows = [tuple(r) for r in c.execute(text(
            "select program_id, task, src_island, dst_island, kind from migrations order by id"))]
    engine.dispose()
    return rows


def test_random_topology_migrates_on_schedule_and_a_resume_draws_the_same_rounds(tmp_path, builtin_tasks):
    task, migration = builtin_tasks["gelu"], MigrationSettings(interval=4, migrants=2, topology=RandomPartner())
    whole, broken = f"sqlite:///{tmp_path / 'whole.db'}", f"sqlite:///{tmp_path / 'broken.db'}"
    events = run_loop(whole, task, 12, IslandsBackend(4), migration)
    rounds = [fields for kind, fields in events if kind == "migrated"]
    assert [r["topology"] for r in rounds] == ["random"] * 3 and sum(r["moved"] for r in rounds) > 0
    assert [r["ordinal"] for r in rounds] == [4, 8, 12]
    assert [r["pairs"] for r in rounds] == [RandomPartner().pairs(4, round_rng(7, n)) for n in (4, 8, 12)]
    order = [(kind, e.get("children_done")) for kind, e in events if kind in ("evaluated", "migrated")]
    assert [order[i + 1][1] for i, (kind, _) in enumerate(order) if kind == "migrated"] == [4, 8, 12]
    assert {kind for *_, kind in migration_rows(whole)} == {"copy"}
    before_kill = []
    with pytest.raises(Killed):
        run_loop(broken, task, 12, IslandsBackend(4, kill_at_proposal=7), migration, events=before_kill)
    resumed = run_loop(broken, task, 12, IslandsBackend(4), migration, resume_count=1)
    both = [(e["ordinal"], e["pairs"]) for kind, e in before_kill + resumed if kind == "migrated"]
    assert both == [(r["ordinal"], r["pairs"]) for r in rounds]  # the draws of a round depend on its ordinal only


def test_moving_migration_records_moves(tmp_path, builtin_tasks):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    run_loop(url, builtin_tasks["gelu"], 8, IslandsBackend(2), MigrationSettings(interval=4, mode="move"))
    kinds = [kind for *_, kind in migration_rows(url)]
    assert kinds[0] == "copy" and "move" in kinds and "reseed" not in kinds  # seeds are copied, elites moved


def children_per_island(events):
    return collections.Counter(e["program"].island for kind, e in events
                               if kind == "evaluated" and e["program"].operator != "seed")


def test_a_stagnant_island_is_reseeded_after_n_evaluations_and_not_before(tmp_path, builtin_tasks):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    # Every child is slower than the seed (its speedup is 1 or more): no island ever finds a new best.
    migration = MigrationSettings(interval=0, reseed_after=3)
    events = run_loop(url, builtin_tasks["gelu"], 11, IslandsBackend(2, speedup=0.5), migration)
    # Each island is reseeded at its 3rd, 6th, ... child evaluation, and only then: the event comes
    # with the evaluation that made it stagnant, before that evaluation's own event.
    seen, reseeded_at = collections.Counter(), []
    for kind, e in events:
        if kind == "evaluated" and e["program"].operator != "seed":
            seen[e["program"].island] += 1
        elif kind == "reseeded":
            assert (e["stagnant_for"], e["elites"]) == (3, 1)
            reseeded_at.append((e["island"], seen[e["island"]] + 1))
    children = children_per_island(events)
    assert sum(children.values()) == 11 and len(children) == 2
    assert sorted(reseeded_at) == sorted((i, n) for i, count in children.items() for n in range(3, count + 1, 3))
    rows = migration_rows(url)
    assert [kind for *_, kind in rows] == ["copy"] + ["reseed"] * len(reseeded_at)
    assert [(src, dst) for _, _, src, dst, kind in rows if kind == "reseed"] == [(1 - i, i) for i, _ in reseeded_at]


def test_stagnation_is_derived_from_the_archive_on_resume(tmp_path, builtin_tasks):
    url, task = f"sqlite:///{tmp_path / 'a.db'}", builtin_tasks["gelu"]
    # A run without reseeding leaves an island with 3 children and no new best (the other with 2) ...
    first = run_loop(url, task, 5, IslandsBackend(2, speedup=0.5), MigrationSettings(interval=0))
    assert "reseeded" not in [kind for kind, _ in first]
    island = next(i for i, count in children_per_island(first).items() if count == 3)
    # ... so a resume that reseeds after 3 does it at once, as a run stopped before its reseed would.
    migration = MigrationSettings(interval=0, reseed_after=3)
    events = run_loop(url, task, 6, IslandsBackend(2, speedup=0.5), migration, resume_count=1)
    kinds = [kind for kind, _ in events]
    assert kinds.index("reseeded") < kinds.index("evaluated")
    assert [(f["island"], f["stagnant_for"]) for k, f in events if k == "reseeded"] == [(island, 3)]
    archive = Archive(url)
    best = archive.qd_figures("gelu", 1 - island)["best_speedup"]  # reseeded from the other island
    assert json.loads(archive.get_meta(RESEEDS_META)) == {"gelu": {str(island): [3, best]}}
    controller = Controller(settings=RunSettings(dir="unused", seed=7), tasks=[task], archive=archive,
                            backend=IslandsBackend(2), migration=migration, resume_count=2)
    controller._start()  # replayed again: the reseed is on record, so nothing is due
    assert controller.stagnation.stagnant() == [] and controller.stagnation._islands[("gelu", island)].best == best
    archive.close()


def test_with_one_island_reseeding_is_a_no_op(tmp_path, builtin_tasks):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    events = run_loop(url, builtin_tasks["gelu"], 8, IslandsBackend(1, speedup=0.5),
                      MigrationSettings(interval=2, reseed_after=2))
    assert not [kind for kind, _ in events if kind == "reseeded"] and migration_rows(url) == []


# -- reading a run ----------------------------------------------------------------------------
def test_the_reader_counts_migrations_by_kind_also_in_an_archive_from_before_kinds(tmp_path):
    from alembic import command

    from archive.queries import ArchiveReader
    from archive.schema import _config

    archive = Archive(f"sqlite:///{tmp_path / 'new.db'}")
    a, b = elite(archive, 256, 3.0, island=0), elite(archive, 512, 1.0, island=1)
    archive.migrate("t", [(0, 1)], count=1)
    archive.migrate("t", [(1, 0)], count=2, move=True)  # a is there already; b moves
    archive.reseed("t", 1)
    archive.close()
    reader = ArchiveReader(path=tmp_path / "new.db")
    assert reader.migration_counts() == {"copy": 1, "move": 1, "reseed": 2} and a.id != b.id
    reader.close()
    engine = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    with engine.begin() as conn:  # an archive of schema 3, read without being upgraded
        command.upgrade(_config(conn), "0003")
        conn.exec_driver_sql("INSERT INTO programs VALUES (1, 't', 0, 0, 'seed', 'X = 1', 'h1', 'k', 1.0)")
        conn.exec_driver_sql("INSERT INTO migrations VALUES (1, 1, 't', 0, 1, 2.0)")
    engine.dispose()
    reader = ArchiveReader(path=tmp_path / "old.db")
    assert reader.migration_counts() == {"copy": 1}
    reader.close()

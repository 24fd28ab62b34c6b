import sqlite3

import numpy as np
import pytest

from archive import Archive, ArchiveError, Insert
from archive.models import SCHEMA_VERSION
from evaluator import EvalResult, Status

SOURCE = "BLOCK_SIZE = {block}\nNUM_WARPS = {warps}\n# kernel {tag}\n"


def src(block=256, warps=4, tag=""):
    return SOURCE.format(block=block, warps=warps, tag=tag)


def ok(speedup):
    return EvalResult(status=Status.CORRECT, speedup=speedup, runtime_ms=1.0, ref_runtime_ms=speedup)


@pytest.fixture
def archive(db_url):
    """The contract tests run on SQLite and, where a server can be started, PostgreSQL."""
    a = Archive(db_url)
    yield a
    a.close()


def add(archive, source, island=0, task="t", parents=(), operator="constants"):
    return archive.add_program(task=task, island=island, generation=len(parents), operator=operator,
                               source=source, parent_ids=parents)


def test_elites_hold_the_best_program_per_cell(archive):
    a = add(archive, src(256, 4, "a"))
    assert archive.record_evaluation(a, ok(1.0)) is Insert.NEW_CELL
    b = add(archive, src(256, 4, "b"), parents=(a.id,))
    assert archive.record_evaluation(b, ok(1.5)) is Insert.IMPROVED
    c = add(archive, src(256, 4, "c"), parents=(a.id,))
    assert archive.record_evaluation(c, ok(1.2)) is Insert.NOT_ADDED
    d = add(archive, src(512, 4), parents=(b.id,))
    assert archive.record_evaluation(d, ok(0.9)) is Insert.NEW_CELL
    e = add(archive, src(1024, 4))
    assert archive.record_evaluation(e, EvalResult(status=Status.INCORRECT, reason="x")) is Insert.NOT_ADDED
    elites = {p.id: p for p in archive.elites("t", 0)}
    assert set(elites) == {b.id, d.id}
    assert elites[b.id].descriptors == {"block_size": "256", "num_warps": "4"}
    assert elites[b.id].parent_ids == (a.id,) and elites[b.id].fitness == 1.5
    stats = archive.stats("t")
    assert stats["evaluations"] == 5 and stats["correct"] == 4 and stats["cells"] == 2
    assert stats["best_speedup"] == 1.5 and stats["qd_score"] == pytest.approx(2.4)
    assert stats["by_status"] == {"correct": 4, "incorrect": 1}


def test_sampling_is_per_island_with_fallback(archive):
    rng = np.random.default_rng(0)
    assert archive.sample_parent("t", 0, rng) is None
    a = add(archive, src(256), island=0)
    archive.record_evaluation(a, ok(1.0))
    b = add(archive, src(512), island=1)
    archive.record_evaluation(b, ok(2.0))
    assert {archive.sample_parent("t", 0, rng).id for _ in range(20)} == {a.id}
    assert {archive.sample_parent("t", 1, rng).id for _ in range(20)} == {b.id}
    assert archive.sample_parent("t", 5, rng).id in {a.id, b.id}  # an empty island borrows
    assert [p.id for p in archive.inspirations("t", exclude=a.id, k=2, rng=rng)] == [b.id]


def test_inspirations_lead_with_the_best(archive):
    rng = np.random.default_rng(1)
    ids = []
    for i, block in enumerate((16, 32, 64, 128, 256)):
        p = add(archive, src(block))
        archive.record_evaluation(p, ok(1.0 + i))
        ids.append(p.id)
    picks = archive.inspirations("t", exclude=ids[0], k=3, rng=rng)
    assert picks[0].id == ids[-1] and len(picks) == 3 and ids[0] not in [p.id for p in picks]


def test_migration_copies_elites_and_records_provenance(archive):
    a = add(archive, src(256), island=0)
    archive.record_evaluation(a, ok(3.0))
    b = add(archive, src(512), island=0)
    archive.record_evaluation(b, ok(1.0))
    assert archive.migrate("t", [(0, 1)], count=1) == 1
    assert [p.id for p in archive.elites("t", 1)] == [a.id]
    assert archive.migrate("t", [(0, 1)], count=1) == 0  # already there, not better


def test_pending_duplicates_and_counts(archive):
    seed = add(archive, src(256), operator="seed")
    archive.record_evaluation(seed, ok(1.0))
    child = add(archive, src(512), parents=(seed.id,))
    assert [p.id for p in archive.pending()] == [child.id]
    assert archive.find_duplicate("t", src(512) + "\n# only a comment differs\n") == child.id
    assert archive.find_duplicate("other", src(512)) is None
    assert archive.child_evaluation_count() == 0 and archive.child_evaluation_counts() == {}
    archive.record_evaluation(child, ok(2.0))
    assert archive.pending() == [] and archive.child_evaluation_count() == 1
    other = add(archive, src(128), task="u", operator="seed")
    archive.record_evaluation(other, ok(1.0))
    archive.record_evaluation(add(archive, src(64), task="u", parents=(other.id,)), ok(1.0))
    archive.record_evaluation(add(archive, src(32), task="u", parents=(other.id,)), ok(1.0))
    assert archive.child_evaluation_counts() == {"t": 1, "u": 2}  # per task, seeds left out


def test_llm_calls_are_recorded(archive):
    p = add(archive, src())
    archive.record_llm_calls([{"model": "m", "prompt": "p", "response": "r", "prompt_tokens": 3,
                               "completion_tokens": 4, "cost_usd": 0.5, "latency_s": 1.0, "error": ""},
                              {"model": "m", "error": "timeout"}], task="t", island=0, operator="llm",
                             program_id=p.id)
    assert archive.llm_spend() == {"calls": 2, "cost_usd": 0.5, "errors": 1, "tokens": 7}


def test_llm_calls_are_written_with_their_program(archive):
    calls = [{"model": "m", "response": "r", "cost_usd": 0.25}, {"model": "m", "error": "timeout"}]
    p = archive.add_program(task="t", island=1, generation=1, operator="llm_diff", source=src(),
                            llm_calls=calls, meta={"k": "v"})
    assert archive.llm_spend() == {"calls": 2, "cost_usd": 0.25, "errors": 1, "tokens": 0}
    with archive._tx() as c:
        rows = c.exec_driver_sql("SELECT program_id, task, island, operator FROM llm_calls").all()
    assert rows == [(p.id, "t", 1, "llm_diff")] * 2
    # One transaction: a call that cannot be stored leaves no program, no meta and no call behind.
    with pytest.raises(ArchiveError):
        archive.add_program(task="u", island=0, generation=1, operator="llm_diff", source=src(512),
                            llm_calls=[{"model": None}], meta={"k": "w"})
    assert not archive.has_programs("u") and archive.get_meta("k") == "v"
    assert archive.llm_spend()["calls"] == 2


def test_stats_of_every_task_are_appended_together(archive):
    for task in ("a", "b"):
        archive.record_evaluation(add(archive, src(), task=task, operator="seed"), ok(1.5))
    archive.record_stats(["a", "b"], islands=2, children_done=8)
    for task in ("a", "b"):
        assert [(h["island"], h["cells"], h["children_done"]) for h in archive.stats_history(task)] == [(-1, 1, 8)]
        assert len(archive.stats_history(task, island=1)) == 1


def test_reopening_keeps_everything(db_url):
    url = db_url
    first = Archive(url)
    p = add(first, src())
    first.record_evaluation(p, ok(1.25))
    first.close()
    again = Archive(url)
    assert again.get(p.id).fitness == 1.25 and again.stats("t")["cells"] == 1


def test_newer_schema_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    Archive(url).set_meta("schema_version", str(SCHEMA_VERSION + 1))
    with pytest.raises(ArchiveError, match="newer than this engine"):
        Archive(url)


def test_corrupted_file_is_refused(tmp_path):
    path = tmp_path / "a.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ArchiveError, match="cannot open archive"):
        Archive(f"sqlite:///{path}")
    assert sqlite3.sqlite_version  # the file was left as it was
    assert path.read_bytes().startswith(b"this is not a database")


def test_sample_parent_uses_the_selection_strategy(archive):
    from evo.core.selection import Tournament
    rng = np.random.default_rng(0)
    ids = []
    for i, block in enumerate((16, 32, 64)):
        p = add(archive, src(block))
        archive.record_evaluation(p, ok(1.0 + i))
        ids.append(p.id)
    add(archive, src(16, tag="child"), parents=(ids[0],))
    assert {archive.sample_parent("t", 0, rng, Tournament(size=3)).id for _ in range(10)} == {ids[2]}


def test_locked_database_is_a_clear_error(tmp_path):
    path = tmp_path / "a.db"
    Archive(f"sqlite:///{path}").close()
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ArchiveError, match="locked"):
            Archive(f"sqlite:///{path}", busy_timeout_s=0.2).set_meta("x", "y")
    finally:
        holder.rollback()
        holder.close()


def test_measured_descriptors_complete_the_cell_on_evaluation(db_url):
    from evo.core.descriptors import by_names

    archive = Archive(db_url, descriptors=by_names(["block_size", "registers"]))
    p = add(archive, src(256))
    assert p.descriptors == {"block_size": "256"}
    result = ok(1.0)
    result.registers = 60
    assert archive.record_evaluation(p, result) is Insert.NEW_CELL
    q = add(archive, src(256, tag="fewer registers"))
    result = ok(0.5)
    result.registers = 30
    assert archive.record_evaluation(q, result) is Insert.NEW_CELL  # another cell, though slower
    archive.close()
    again = Archive(db_url, descriptors=by_names(["block_size", "registers"]))
    assert again.get(p.id).descriptors == {"block_size": "256", "registers": "64"}
    assert {e.id for e in again.elites("t")} == {p.id, q.id}
    again.close()


def test_an_elite_is_replaced_only_beyond_the_measured_noise(archive):
    elite = add(archive, src(256, tag="elite"))
    archive.record_evaluation(elite, ok(1.0))

    def challenge(speedup, noise, tag):
        result = ok(speedup)
        result.speedup_noise = noise
        return archive.record_evaluation(add(archive, src(256, tag=tag)), result)

    assert challenge(1.04, 0.05, "within the noise") is Insert.NOT_ADDED
    assert challenge(1.04, None, "no noise figure") is Insert.IMPROVED
    assert challenge(1.06, 0.05, "beyond the noise of 1.04") is Insert.NOT_ADDED
    assert challenge(1.20, 0.05, "clearly faster") is Insert.IMPROVED
    assert archive.elites("t")[0].fitness == 1.20

"""`evo status` reads a running or finished run read-only: no lock taken, nothing written."""
import fcntl
import hashlib
import json
import shutil

import pytest

from archive import Archive
from evo.cli import main
from tests.test_cli import evo


def _snapshot(run_dir):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run_dir.iterdir())}


def test_status_of_a_finished_run_writes_nothing(small_run, capsys):
    before = _snapshot(small_run)
    assert main(["status", f"run.dir={small_run}"]) == 0
    out = capsys.readouterr().out
    assert _snapshot(small_run) == before  # not even -wal or -shm files
    for column in ("programs", "evals", "correct", "best", "coverage", "QD-score", "operator", "success"):
        assert column in out
    assert "gelu" in out and "row_sum" in out and "constants" in out and "seed" in out
    assert "children evaluated: 4; resumes: 0; LLM calls: 0, 0 failed ($0.0000)" in out
    assert "elites placed on other islands: 2 copy" in out  # each task's seed, to island 1
    # Where the evaluators' time went, from every evaluation's phases (seeds and 4 children).
    line = next(l for l in out.splitlines() if l.startswith("evaluator time:"))
    assert "for 6 evaluations" in line and "per evaluator-minute" in line
    for phase in ("start and transfer", "load", "checks", "timing", "in timed calls"):
        assert phase in line
    for part in ("reference", "smoke test and JIT", "adversarial values", "timing loop", "timed-call checks"):
        assert part in line.split("seconds per evaluation in:")[1]


def test_status_of_a_running_run_sees_its_last_commit_without_the_lock(small_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    with open(run_dir / ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the running engine holds it
        archive = Archive(f"sqlite:///{run_dir / 'archive.db'}")  # the run's open connection, in WAL mode
        before = archive.stats("gelu")["programs"]
        archive.add_program(task="gelu", island=0, generation=9, operator="constants", source="# new child\n")
        assert (run_dir / "archive.db-wal").stat().st_size > 0  # the new program sits in the WAL
        db, wal = (run_dir / "archive.db").read_bytes(), (run_dir / "archive.db-wal").read_bytes()
        out = evo("status", f"run.dir={run_dir}", timeout=120)
        assert out.returncode == 0, out.stderr
        gelu = next(line for line in out.stdout.splitlines() if "gelu" in line)
        assert gelu.split("│")[2].strip() == str(before + 1)  # those when the run stopped, and the new one
        assert (run_dir / "archive.db").read_bytes() == db and (run_dir / "archive.db-wal").read_bytes() == wal
        archive.close()


@pytest.mark.parametrize("case", ["missing", "no_run", "no_archive", "extra_argument"])
def test_status_errors(tmp_path, small_run, capsys, case):
    run_dir = tmp_path / "run"
    if case == "no_run":
        run_dir.mkdir()
    if case == "no_archive":
        run_dir.mkdir()
        for name in ("run.json", "config.yaml"):
            shutil.copyfile(small_run / name, run_dir / name)
    args = [f"run.dir={run_dir}"] + (["out=x"] if case == "extra_argument" else [])
    assert main(["status", *args]) == 2
    err = capsys.readouterr().err
    expected = {"missing": "does not exist", "no_run": "holds no evo run", "no_archive": "has no archive",
                "extra_argument": "usage: evo status"}[case]
    assert expected in err
    if case == "no_archive":
        assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "run.json"]
    assert json.loads((small_run / "run.json").read_text())["tasks"] == ["gelu", "row_sum"]


def test_status_shows_the_meta_prompt_pool_of_a_run_that_evolved_one(small_run, tmp_path, capsys):
    from operators.meta_prompt import STATE_KEY, PromptEvolution

    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    pool = PromptEvolution()
    pool.fragments[3].children, pool.fragments[3].improvements = 5, 4
    archive = Archive(f"sqlite:///{run_dir / 'archive.db'}")
    archive.set_meta(STATE_KEY, json.dumps(pool.state()))
    archive.close()
    assert main(["status", f"run.dir={run_dir}"]) == 0
    out = capsys.readouterr().out
    assert "meta-prompt evolution: the best 5 of 6 fragments" in out
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    best = next(row for row in rows if row[:3] == ["3", "5", "4"])  # fragment, children, improved
    assert best[4].startswith(pool.fragments[3].sentences[0][:20])


@pytest.mark.parametrize("per_task, line", [(20, "children evaluated: 4 (at most 20 per task); resumes: 0"),
                                            ("absent", "children evaluated: 4; resumes: 0")])  # an older run's
def test_status_says_the_cap_per_task(small_run, tmp_path, capsys, per_task, line):
    from omegaconf import OmegaConf

    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    config = OmegaConf.load(run_dir / "config.yaml")
    if per_task == "absent":
        del config.run.budget["per_task"]
    else:
        config.run.budget.per_task = per_task
    OmegaConf.save(config, run_dir / "config.yaml")
    assert main(["status", f"run.dir={run_dir}"]) == 0
    assert line in capsys.readouterr().out


def test_the_phase_line_counts_overlapping_evaluations_once_in_wall_time():
    from archive.queries import _union
    from evo.views.summary import phase_line

    assert _union([(0, 4), (2, 6), (10, 11), (10.5, 10.7)]) == pytest.approx(7.0)
    assert _union([]) == 0.0
    seconds = {"total_s": 12.0, "timing_s": 4.0, "timed_calls_s": 2.0}
    # Two evaluations of 6 s each, in flight together: 6 s of wall time, not 12.
    line = phase_line({"evaluations": 2, "seconds": seconds, "under_way_s": 6.0})
    assert "10.0 per evaluator-minute" in line and "6 s of wall time had one under way (20.0 per minute" in line
    one_at_a_time = phase_line({"evaluations": 2, "seconds": seconds, "under_way_s": 12.0})
    assert "wall time" not in one_at_a_time


def test_the_phase_line_says_how_long_pipelined_evaluations_waited():
    from evo.views.summary import phase_line

    totals = {"evaluations": 2, "under_way_s": 6.0, "seconds": {
        "total_s": 10.0, "host_s": 1.0, "load_s": 1.0, "checks_s": 4.0, "timing_s": 4.0, "timed_calls_s": 2.0,
        "start_gate_wait_s": 0.4, "compile_gate_wait_s": 0.2, "gate_wait_s": 1.0, "queued_s": 3.0}}
    within = phase_line(totals).split("seconds per evaluation in:")[1]
    for part in ("waiting after the start 0.20", "waiting after a compile 0.10", "waiting to time 0.50",
                 "queued for a worker 1.50"):
        assert part in within
    assert "6 s of wall time had one under way" in phase_line(totals)


def test_phase_totals_split_by_task_and_the_seconds_with_k_evaluations_under_way(small_run):
    from archive.queries import ArchiveReader, seconds_under_way

    reader = ArchiveReader(path=small_run / "archive.db")
    try:
        totals = reader.phase_totals()
    finally:
        reader.close()
    assert set(totals["tasks"]) == {"gelu", "row_sum"}
    assert sum(t["evaluations"] for t in totals["tasks"].values()) == totals["evaluations"] == 6
    for phase, seconds in totals["seconds"].items():
        assert sum(t["seconds"].get(phase, 0.0) for t in totals["tasks"].values()) == pytest.approx(seconds)
    assert len(totals["spans"]) == 6 and all(began < ended for began, ended in totals["spans"])
    # Two overlapping spans and a gap, in a window cut through the first: 2 s idle, 2 s with one, 1 s with two.
    assert seconds_under_way([(0, 4), (2, 3)], start=1, end=6) == pytest.approx({0: 2.0, 1: 2.0, 2: 1.0})
    assert seconds_under_way([], start=0, end=5) == {0: 5.0}

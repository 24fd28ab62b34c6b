"""A resumed run goes on with what it holds: its config with the overrides given (listed, applied or
refused), its stored problem sources unless the user chooses otherwise, and the seeds it derived."""
import dataclasses
import json
import shutil

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from archive import Archive
from archive.queries import ArchiveReader
from evaluator import DerivedSeed
from evo.config import build
from evo.core.errors import ConfigError, RunDirError
from evo.core.task import SUITE_DIR, load_task
from evo.loop.seed_store import store_seed, stored_seed
from evo.resume import held_by_run, resumed_config, store_sources, tasks_to_resume
from tests.support import StandInBackend
from tests.test_cli import LOCAL, evo


def composed(*overrides: str):
    with initialize_config_module(config_module="conf", version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


FIRST = ["run.dir=/runs/a", "task=quick", "run.budget.evaluations=12", "run.backend=local", "run.seed=4",
         "archive.descriptors=[block_size]"]


def resume(*overrides: str):
    saved = OmegaConf.to_yaml(composed(*FIRST), resolve=True)
    return resumed_config(composed(*overrides), saved, list(overrides), composed())


def test_a_resume_that_names_only_the_run_dir_goes_on_with_the_saved_config():
    cfg, changes = resume("run.dir=/runs/a")
    assert changes == []
    assert list(cfg.task.names) == ["gelu", "row_sum"] and cfg.run.budget.evaluations == 12
    assert cfg.run.backend == "local"
    assert cfg.run.seed == 4 and list(cfg.archive.descriptors) == ["block_size"]


def test_overrides_a_resumed_run_can_honour_are_applied_and_listed():
    cfg, changes = resume("run.dir=/runs/a", "run.budget.evaluations=40", "run.budget.per_task=5",
                          "llm.budget.usd=2.5", "operators.constants.weight=3", "evaluator.timeout_s=30",
                          "run.progress=false", "run.backend=local")  # the same as saved: not a change
    assert [c.line() for c in changes] == [
        "evaluator.timeout_s: 120 -> 30", "llm.budget.usd: null -> 2.5", "operators.constants.weight: 1.0 -> 3",
        "run.budget.evaluations: 12 -> 40", "run.budget.per_task: null -> 5", "run.progress: true -> false"]
    assert cfg.run.budget.evaluations == 40 and cfg.run.budget.per_task == 5
    assert cfg.llm.budget.usd == 2.5 and cfg.evaluator.timeout_s == 30
    assert list(cfg.task.names) == ["gelu", "row_sum"] and cfg.run.seed == 4  # the rest stays as saved


def test_a_group_given_again_counts_as_given():
    cfg, changes = resume("run.dir=/runs/a", "task=default")
    assert cfg.task.names is None and [c.line() for c in changes] == ['task.names: ["gelu", "row_sum"] -> null']


@pytest.mark.parametrize("override, key", [("run.seed=5", "run.seed"),
                                           ("archive.descriptors=[num_warps]", "archive.descriptors"),
                                           ("archive.cvt_cells=16", "archive.cvt_cells"),
                                           ("islands.count=4", "islands.count")])
def test_overrides_that_change_what_the_run_is_are_refused(override, key):
    with pytest.raises(ConfigError, match="keeps what makes it the run it is") as refused:
        resume("run.dir=/runs/a", "run.budget.evaluations=40", override)
    assert key in str(refused.value) and "run.budget" not in str(refused.value)


def test_a_key_the_saved_config_lacks_takes_its_default_or_the_value_given():
    saved = OmegaConf.to_container(composed(*FIRST), resolve=True)
    for key in ("prepared_per_island", "llm_seeds", "compile_seeds"):  # as in a run made before the keys existed
        del saved["run"][key]
    cfg, changes = resumed_config(composed("run.dir=/runs/a"), OmegaConf.to_yaml(saved), ["run.dir=/runs/a"],
                                  composed())
    assert changes == [] and cfg.run.prepared_per_island is None
    built = build(cfg)  # with conf/'s defaults: evo.config.build needs no fallback of its own
    assert (built.run.prepared_per_island, built.run.llm_seeds, built.compile_seeds) == (None, 4, True)
    cfg, changes = resumed_config(composed("run.prepared_per_island=3"), OmegaConf.to_yaml(saved),
                                  ["run.prepared_per_island=3"], composed())
    assert [c.line() for c in changes] == ["run.prepared_per_island: (unset) -> 3"]


def test_the_choice_to_keep_stored_sources_is_never_taken_from_the_saved_config():
    saved = OmegaConf.to_yaml(composed(*FIRST, "run.keep_stored_sources=true"), resolve=True)
    cfg, changes = resumed_config(composed("run.dir=/runs/a"), saved, ["run.dir=/runs/a"], composed())
    assert cfg.run.keep_stored_sources is False and changes == []


def test_a_changed_problem_source_is_named_and_refused_unless_the_stored_one_is_kept(tmp_path):
    gelu = load_task(SUITE_DIR / "gelu.py")
    url = f"sqlite:///{tmp_path / 'archive.db'}"
    archive = Archive(url)
    store_sources(archive, [gelu])
    archive.add_program(task="gelu", island=0, generation=0, operator="seed", source=gelu.seeds[0])
    archive.close()
    held = held_by_run(url, ["gelu", "softmax"])
    assert set(held.sources) == {"gelu"} and held.searched == {"gelu"}
    assert tasks_to_resume([gelu], held, keep_stored=False) == ([gelu], [])
    edited = dataclasses.replace(gelu, source=gelu.source + "\nX = 1\n")
    with pytest.raises(RunDirError, match="changed since this run stored them") as refused:
        tasks_to_resume([edited], held, keep_stored=False)
    assert gelu.path in str(refused.value) and "run.keep_stored_sources=true" in str(refused.value)
    (kept,), notes = tasks_to_resume([edited], held, keep_stored=True)
    assert kept.source == gelu.source and kept.seeds == gelu.seeds and "stored source" in notes[0]
    assert held_by_run(f"sqlite:///{tmp_path / 'none.db'}", ["gelu"]) is None  # no archive yet


def test_a_task_the_run_has_no_programs_of_takes_its_edited_file(tmp_path):
    # A task set aside (its reference failed, say) was never searched: its fixed file is taken.
    softmax = load_task(SUITE_DIR / "softmax.py")
    url = f"sqlite:///{tmp_path / 'archive.db'}"
    archive = Archive(url)
    store_sources(archive, [softmax])
    fixed = dataclasses.replace(softmax, source=softmax.source + "\n# fixed\n")
    (task,), notes = tasks_to_resume([fixed], held_by_run(url, ["softmax"]), keep_stored=False)
    assert task is fixed and "no programs of it yet" in notes[0]
    store_sources(archive, [task])  # the edited source becomes the stored one
    assert tasks_to_resume([fixed], held_by_run(url, ["softmax"]), keep_stored=False) == ([fixed], [])
    archive.close()


def test_a_derived_seed_and_a_failure_are_stored_by_the_source_they_were_derived_from(tmp_path):
    gelu, softmax = load_task(SUITE_DIR / "gelu.py"), load_task(SUITE_DIR / "softmax.py")
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    assert stored_seed(archive, gelu) is None
    store_seed(archive, gelu, source="class ModelNew: ...")
    store_seed(archive, softmax, error="an aten fallback: aten.foo")
    with pytest.raises(ValueError):
        store_seed(archive, gelu)
    archive.close()
    reader = ArchiveReader(path=tmp_path / "archive.db")  # read before a resumed run opens its archive
    derived, failed = stored_seed(reader, gelu), stored_seed(reader, softmax)
    assert derived.ok and derived.source == "class ModelNew: ..."
    assert not failed.ok and "aten.foo" in failed.message(softmax) and "not tried again" in failed.message(softmax)
    edited = dataclasses.replace(gelu, source=gelu.source + "\n# edited\n", seeds=())
    assert stored_seed(reader, edited) is None  # another source: derived anew
    reader.close()


class CountingBackend(StandInBackend):
    """A backend that counts the seeds it was asked to derive."""

    def __init__(self, seed_reply):
        self.seed_reply, self.calls = seed_reply, 0

    def compile_seed(self, task_name, task_source):
        self.calls += 1
        return self.seed_reply


def test_a_resume_takes_the_stored_seed_or_failure_and_derives_nothing(tmp_path):
    from rich.console import Console

    from evo.core.task import Task
    from evo.loop.startup import prepare_tasks

    seedless, console = Task(name="gelu", path=str(SUITE_DIR / "gelu.py"), source="..."), Console(quiet=True)

    def prepare(backend, reader=None):
        return prepare_tasks([seedless], backend, on_gpu=True, compile_seeds=True, llm=False, earlier={},
                             has_programs=set(), console=console,
                             stored=(lambda t: stored_seed(reader, t)) if reader else None)

    backend = CountingBackend(DerivedSeed(ok=True, source="class ModelNew: pass\n"))
    prepared = prepare(backend)
    assert backend.calls == 1 and prepared.tasks[0].seeds == ("class ModelNew: pass\n",)
    assert prepared.derived["gelu"].ok  # for the run to store
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    store_seed(archive, seedless, source=prepared.derived["gelu"].source)
    archive.close()
    reader = ArchiveReader(path=tmp_path / "archive.db")
    prepared = prepare(backend, reader)
    assert backend.calls == 1 and prepared.tasks[0].seeds == ("class ModelNew: pass\n",) and prepared.derived == {}
    reader.close()
    archive = Archive(f"sqlite:///{tmp_path / 'failed.db'}")
    store_seed(archive, seedless, error="graph break")
    archive.close()
    reader = ArchiveReader(path=tmp_path / "failed.db")
    prepared = prepare(backend, reader)
    assert backend.calls == 1 and prepared.derived == {} and not prepared.tasks
    (aside,) = prepared.set_aside
    assert aside.stage == "seed" and "not tried again" in aside.reason and "graph break" in aside.reason
    reader.close()
    failing = CountingBackend(DerivedSeed(ok=False, error="an aten fallback"))
    prepared = prepare(failing)
    assert not prepared.derived["gelu"].ok and prepared.derived["gelu"].error == "an aten fallback"
    assert "an aten fallback" in prepared.set_aside[0].reason


@pytest.mark.slow
def test_editing_a_problem_file_then_resuming(tmp_path):
    """The issue's case: the problem file of a run's task folder edited, then `evo run` on the run dir."""
    folder, run_dir = tmp_path / "tasks", tmp_path / "run"
    (folder / "seeds").mkdir(parents=True)
    shutil.copy(SUITE_DIR / "gelu.py", folder / "gelu.py")
    shutil.copy(SUITE_DIR / "seeds" / "gelu.py", folder / "seeds" / "gelu.py")
    first = evo("run", f"run.dir={run_dir}", f"task.path={folder}", "run.budget.evaluations=1", *LOCAL)
    assert first.returncode == 0, first.stderr
    (folder / "gelu.py").write_text((folder / "gelu.py").read_text() + "\n# the reference, edited\n")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}

    refused = evo("run", f"run.dir={run_dir}", f"task.path={folder}", "run.budget.evaluations=2")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert f"task gelu: {folder / 'gelu.py'}" in refused.stderr and "run.keep_stored_sources=true" in refused.stderr
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before  # nothing changed

    kept = evo("run", f"run.dir={run_dir}", "run.budget.evaluations=2", "run.keep_stored_sources=true")
    assert kept.returncode == 0, kept.stderr
    assert "override run.budget.evaluations: 1 -> 2" in kept.stdout and "stored source" in kept.stdout
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    (resumed,) = [e for e in events if e["event"] == "resumed"]
    assert resumed["overrides"] == [{"key": "run.budget.evaluations", "saved": 1, "given": 2}]
    assert "gelu" in resumed["notes"][0]
    saved = OmegaConf.load(run_dir / "config.yaml")
    assert saved.run.budget.evaluations == 2 and saved.run.backend == "local"  # the config it last ran with

    again = evo("run", f"run.dir={run_dir}", "run.budget.evaluations=2")  # the choice is not saved
    assert again.returncode != 0 and "changed since this run stored them" in again.stderr
    fresh = evo("run", f"run.dir={tmp_path / 'new'}", f"task.path={folder}", "run.budget.evaluations=1", *LOCAL)
    assert fresh.returncode == 0, fresh.stderr


def test_a_run_made_before_the_domain_model_moved_names_its_targets_where_they_are_now(tmp_path):
    """A run dir keeps the config it ran with: one made before evo.task moved to evo.core.task (and
    the selection, inspiration, ...) resumes and is read by status, report and export all the same."""
    from hydra.utils import get_class, get_method

    from evo.core.hydra_nodes import current_targets
    from evo.resume import saved_config

    old = ("task:\n  _target_: evo.task.load_tasks\n  path: x\nselection:\n  _target_: evo.selection.Uniform\n"
           "inspiration:\n  _target_: 'evo.inspiration.BestThenRandom'\nhydra_callback:\n"
           "  _target_: evo.sweep.SweepSummary\nnote: evo.task is named here, not as a target\n")
    (tmp_path / "config.yaml").write_text(old)
    (tmp_path / "run.json").write_text("{}")
    now = saved_config(tmp_path)
    assert now == current_targets(old)
    assert "_target_: evo.core.task.load_tasks" in now and "_target_: evo.core.selection.Uniform" in now
    assert "_target_: 'evo.core.inspiration.BestThenRandom'" in now
    assert "_target_: evo.sweep.SweepSummary" in now and "note: evo.task is named here" in now
    get_method("evo.core.task.load_tasks"), get_class("evo.core.selection.Uniform")

"""run.seeds_from (evo.loop.borrow): a new run of problems an earlier run prepared on this host takes
that run's derived seeds and passed checks instead of preparing them again, and keeps them as its own."""
import json
import shutil
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from archive.queries import open_reader
from evaluator import PreparedTask, TaskCheck
from evaluator.replies import DerivedSeed
from evo import runner
from evo.config import build, to_yaml
from evo.core.errors import ConfigError
from evo.core.task import SUITE_DIR, load_tasks
from evo.loop.borrow import Borrowed, first_found
from evo.loop.check_store import stored_check
from evo.loop.seed_store import stored_seed
from islands import LocalBackend
from tests.support.gpu_host import pretend_gpu_host
from tests.support.llm_server import TrivialEvaluator

H100 = "NVIDIA H100 80GB HBM3 x1; torch 2.11.0"
SEED = (SUITE_DIR / "seeds" / "gelu.py").read_text()


class DerivingBackend(LocalBackend):
    """Every reference passes and every seed asked for is derived; what each start asked is recorded."""

    asked: list[list[tuple[str, bool]]] = []

    def prepare_stream(self, tasks):
        DerivingBackend.asked.append([(t.name, t.seed) for t in tasks])
        for task in tasks:
            yield task.name, PreparedTask(TaskCheck(ok=True, shapes=1),
                                          DerivedSeed(ok=True, source=SEED) if task.seed else None)


class Evaluator(TrivialEvaluator):
    def score(self, task_name, task_source, source):
        time.sleep(0.01)
        return super().score(task_name, task_source, source)


@pytest.fixture
def start(tmp_path, monkeypatch):
    problems = tmp_path / "problems"  # a problem without a seed kernel: a GPU start derives one
    problems.mkdir()
    shutil.copy(SUITE_DIR / "gelu.py", problems / "gelu.py")
    environment = {"now": H100}

    def start(run, budget, *extra):
        with initialize_config_module(config_module="conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                f"run.dir={tmp_path / run}", "run.backend=local", "run.progress=false", f"task.path={problems}",
                f"run.budget.evaluations={budget}", "islands.count=1", *extra])
        return runner.run_search(build(cfg), to_yaml(cfg))

    pretend_gpu_host(monkeypatch, DerivingBackend, Evaluator, environment)
    DerivingBackend.asked = []
    start.environment = environment
    start.problems = problems
    return start


def _meta(run_dir: Path, problems: Path):
    task = load_tasks(path=str(problems))[0]
    reader = open_reader(f"sqlite:///{run_dir / 'archive.db'}")
    try:
        return stored_seed(reader, task), stored_check(reader, task, H100)
    finally:
        reader.close()


@pytest.mark.slow
def test_a_new_run_takes_another_runs_seed_and_check_and_keeps_them(start, tmp_path):
    start("first", 2)
    assert DerivingBackend.asked == [[("gelu", True)]]
    rows = start("second", 2, f"run.seeds_from={tmp_path / 'first'}")
    assert DerivingBackend.asked == [[("gelu", True)]]  # nothing prepared again
    assert sum(r["evaluations"] for r in rows) >= 2
    seed, check = _meta(tmp_path / "second", start.problems)
    assert seed is not None and seed.source == SEED and seed.environment == H100
    assert check == TaskCheck(ok=True, shapes=1)
    start("second", 4)  # resumed without the key: the run holds what it took
    assert DerivingBackend.asked == [[("gelu", True)]]
    config = (tmp_path / "second" / "config.yaml").read_text()
    events = [json.loads(line) for line in (tmp_path / "second" / "events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "start" for e in events) == 2 and "seeds_from" in config


@pytest.mark.slow
def test_another_environment_derives_and_checks_again(start, tmp_path):
    start("first", 2)
    start.environment["now"] = "NVIDIA H200 x1; torch 2.11.0"  # autotuned for other GPUs: not taken
    start("other", 2, f"run.seeds_from={tmp_path / 'first'}")
    assert DerivingBackend.asked == [[("gelu", True)], [("gelu", True)]]
    seed, _ = _meta(tmp_path / "other", start.problems)
    assert seed.environment == "NVIDIA H200 x1; torch 2.11.0"


def test_a_directory_without_a_run_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="holds no run"):
        Borrowed.open(tmp_path, H100)
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "archive.db").write_text("not a database")
    with pytest.raises(ConfigError, match="cannot be read"):
        Borrowed.open(tmp_path, H100)


class Reader:
    def __init__(self, **record):
        self.record = {"source": SEED, "error": None, "stored_at": 0.0, **record}

    def meta(self, key):
        return json.dumps(self.record)


@pytest.mark.parametrize("record, taken", [
    ({"environment": H100}, True),
    ({}, True),  # stored by an engine that recorded no environment
    ({"environment": "NVIDIA H200 x1; torch 2.11.0"}, False),
    ({"source": None, "error": "out of memory", "environment": H100}, False),  # a failure is tried again
])
def test_which_seeds_are_taken(record, taken):
    borrowed = Borrowed(Reader(**record), Path("/runs/first"), H100)
    task = load_tasks(suite="gelu")[0]
    seed = borrowed.seed(task)
    assert (seed is not None) is taken and (task.name in borrowed.seeds) is taken
    if taken:
        assert seed.origin == "the run in /runs/first"


def test_first_found_skips_absent_lookups_and_answers_in_order():
    assert first_found(None, None) is None
    lookup = first_found(None, lambda t: None, lambda t: t * 2, lambda t: t * 3)
    assert lookup(2) == 4

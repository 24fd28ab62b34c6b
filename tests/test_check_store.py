"""A reference that passed its check is not checked again by a later start of the run in the same
environment (evo.loop.check_store): a resume of large problems starts searching them at once."""
import json
import time

import pytest
from hydra import compose, initialize_config_module

from evaluator import PreparedTask, TaskCheck
from evo import runner
from evo.config import build, to_yaml
from evo.core.task import Task
from evo.loop.check_store import check_key, store_check, stored_check
from islands import LocalBackend
from tests.support.gpu_host import pretend_gpu_host
from tests.support.llm_server import TrivialEvaluator

H100 = "NVIDIA H100 80GB HBM3 x1; torch 2.11.0"


class Meta(dict):
    def get_meta(self, key):
        return self.get(key)

    def set_meta(self, key, value):
        self[key] = value


def _task(source="class Model: pass\n"):
    return Task(name="gelu", path="gelu.py", source=source)


def test_a_passed_check_is_kept_for_its_files_and_environment():
    archive, task = Meta(), _task()
    store_check(archive, task, TaskCheck(ok=True, shapes=2, warnings=("barely depends",)), H100)
    assert stored_check(archive, task, H100) == TaskCheck(ok=True, shapes=2, warnings=("barely depends",))
    assert stored_check(archive, task, "NVIDIA H200 x1; torch 2.11.0") is None  # another GPU checks again
    assert stored_check(archive, task, "") is None  # an environment not known: check again
    assert stored_check(archive, _task("class Model: x = 1\n"), H100) is None  # the files changed


def test_a_failed_check_or_an_unknown_environment_is_not_kept():
    archive, task = Meta(), _task()
    store_check(archive, task, TaskCheck(ok=False, stage="reference", error="ValueError"), H100)
    store_check(archive, task, TaskCheck(ok=True), "")
    assert check_key(task) not in archive


class RecordingBackend(LocalBackend):
    """Every reference passes; the tasks each start asked to prepare are recorded."""

    asked: list[list[str]] = []

    def prepare_stream(self, tasks):
        RecordingBackend.asked.append([t.name for t in tasks])
        for task in tasks:
            yield task.name, PreparedTask(TaskCheck(ok=True, shapes=1))


class Evaluator(TrivialEvaluator):
    def score(self, task_name, task_source, source):
        time.sleep(0.01)
        return super().score(task_name, task_source, source)


@pytest.mark.slow
def test_a_resume_in_the_same_environment_checks_no_reference_again(tmp_path, monkeypatch):
    names = ["gelu", "row_sum"]
    environment = {"now": H100}

    def start(budget):
        with initialize_config_module(config_module="conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                f"run.dir={tmp_path / 'run'}", "run.backend=local", "run.progress=false",
                "task.names=[" + ",".join(names) + "]", f"run.budget.evaluations={budget}", "islands.count=1"])
        return runner.run_search(build(cfg), to_yaml(cfg))

    pretend_gpu_host(monkeypatch, RecordingBackend, Evaluator, environment)
    RecordingBackend.asked = []
    start(4)
    rows = start(8)  # resumed on the same GPU: both references were checked by the first start
    assert sum(r["evaluations"] for r in rows) == 8 + 2  # and both searched: the children and the two seeds
    environment["now"] = "NVIDIA H200 x1; torch 2.11.0"
    start(12)  # resumed on another GPU: checked again
    assert [sorted(a) for a in RecordingBackend.asked] == [names, names]
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "start" for e in events) == 3


def test_the_environment_names_the_gpu_models_and_torch(monkeypatch):
    from evaluator import device

    monkeypatch.setattr(device, "_host_gpus", lambda: {"count": 2, "names": ["H100", "H100"], "torch": "2.11.0"})
    assert device.gpu_environment() == "H100 x2; torch 2.11.0"
    monkeypatch.setattr(device, "_host_gpus", lambda: {"count": 2, "names": [], "torch": "2.11.0"})
    assert device.gpu_environment() == ""  # names not read: no check is taken from an earlier start
    monkeypatch.setattr(device, "_host_gpus", lambda: {"count": 0, "names": [], "torch": "2.11.0"})
    assert device.gpu_environment() == ""

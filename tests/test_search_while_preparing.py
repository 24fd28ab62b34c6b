"""`evo run`'s start on a GPU with a pipeline (evo.runner): the search begins with the first task
prepared and the others join as their preparation ends, each recorded as it comes.  The GPU is
faked: a backend whose preparation comes task by task, slowly, and an instant evaluator."""
import json
import threading
import time

import pytest
from hydra import compose, initialize_config_module

from evaluator import PreparedTask, TaskCheck
from evo import runner
from evo.config import build, to_yaml
from islands import Island, LocalBackend
from tests.support.llm_server import TrivialEvaluator


class SlowlyPreparingBackend(LocalBackend):
    """Tasks prepared one at a time, ``delay`` seconds each, in the order given; ``failing``: the
    tasks whose reference raises."""

    def __init__(self, islands, order, failing=(), delay=0.4):
        super().__init__(islands, lambda i: Evaluator(), 1)
        self.order, self.failing, self.delay = order, set(failing), delay
        self.started_at: dict[str, float] = {}
        self.prepared_at: dict[str, float] = {}

    def prepare_stream(self, tasks):
        wanted = {t.name: t for t in tasks}
        for name in [n for n in self.order if n in wanted]:
            time.sleep(self.delay)
            self.prepared_at[name] = time.monotonic()
            ok = name not in self.failing
            yield name, PreparedTask(TaskCheck(ok=True) if ok else TaskCheck(ok=False, error="ValueError: broken reference"))


class Evaluator(TrivialEvaluator):
    lock = threading.Lock()
    evaluated_at: list[tuple[str, float]] = []

    def score(self, task_name, task_source, source):
        time.sleep(0.02)
        with self.lock:
            self.evaluated_at.append((task_name, time.monotonic()))
        return super().score(task_name, task_source, source)


@pytest.mark.slow
def test_the_search_starts_with_the_first_task_and_the_others_join_as_they_are_prepared(tmp_path, monkeypatch):
    order = ["gelu", "row_sum", "softmax", "layernorm"]
    with initialize_config_module(config_module="conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            f"run.dir={tmp_path / 'run'}", "run.backend=local", "run.progress=false", "task.names=[" + ",".join(order) + "]",
            "run.budget.evaluations=12", "islands.count=2", "operators.param_crossover.weight=0"])
    components = build(cfg)
    made = {}

    def make_backend(c, device, gpus, resume_count):
        islands = [Island(i, c.operators, c.weights, c.run.seed, resume_count, c.descriptors) for i in range(2)]
        made["backend"] = SlowlyPreparingBackend(islands, order, failing={"softmax"})
        return made["backend"]

    monkeypatch.setattr(runner, "resolve_device", lambda wanted: ("cuda", 1))
    monkeypatch.setattr(runner, "probe", lambda **kw: {"processes": "shared", "filesystem": "shared",
                                                       "network": "shared", "why": {}})
    monkeypatch.setattr(runner, "make_backend", make_backend)
    Evaluator.evaluated_at = []
    rows = runner.run_search(components, to_yaml(cfg))

    backend = made["backend"]
    first_evaluation = min(t for _, t in Evaluator.evaluated_at)
    assert first_evaluation < backend.prepared_at["layernorm"]  # searching before the last task was prepared
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    joined = [e["task"] for e in events if e["event"] == "task_joined"]
    assert joined == ["row_sum", "layernorm"]  # gelu started the search; softmax was set aside
    aside = [e for e in events if e["event"] == "task_set_aside"]
    assert [(e["task"], e["stage"]) for e in aside] == [("softmax", "reference")]
    searched = {r["task"]: r for r in rows}
    assert all(searched[name]["evaluations"] >= 2 for name in ("gelu", "row_sum", "layernorm"))  # seed and children
    assert sum(r["evaluations"] for r in rows) == 12 + 3  # the budget's children and the three seeds

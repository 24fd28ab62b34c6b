"""Every config composes and instantiates (catches a broken _target_ without a run)."""
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from evo.config import build
from evo.core.errors import ConfigError, EvoError

CONF = Path(__file__).parents[1] / "conf"


def cfg(*overrides):
    with initialize_config_module(config_module="conf", version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("suite", sorted(p.stem for p in (CONF / "task").glob("*.yaml")))
def test_every_task_suite_builds(suite, tmp_path):
    components = build(cfg(f"task={suite}", f"run.dir={tmp_path}"))
    assert components.tasks and all(t.seeds for t in components.tasks)


def test_defaults_build_the_offline_search(tmp_path):
    c = build(cfg(f"run.dir={tmp_path}"))
    assert [op.name for op in c.operators] == ["constants", "param_crossover", "dot_precision", "load_hints", "split_k", "persistent_tiles", "persistent_reduction", "split_reduction", "fuse_epilogue", "sweep"] and c.llm is None
    assert c.operators[2].tolerance == "strict" and c.run.sweep_children == 8 and c.weights[9] == 0
    assert build(cfg(f"run.dir={tmp_path}", "evaluator.tolerance=kernelbench")).operators[2].tolerance == "kernelbench"
    assert build(cfg(f"run.dir={tmp_path}", "operators.sweep.operator.max_children=0")).run.sweep_children == 0
    assert c.steering is None
    assert len(c.tasks) == 8 and c.island_count == 2 and c.backend == "ray"
    assert c.evaluator.device == "auto" and c.ray.address is None
    assert c.archive_url == f"sqlite:///{tmp_path.resolve() / 'archive.db'}"


def test_llm_model_enables_the_llm_operators(tmp_path):
    c = build(cfg(f"run.dir={tmp_path}", "llm.model=openai/x", "llm.api_base=http://127.0.0.1:1/v1"))
    names = [op.name for op in c.operators]
    assert names == ["constants", "param_crossover", "dot_precision", "load_hints", "split_k", "persistent_tiles", "persistent_reduction", "split_reduction", "fuse_epilogue", "sweep", "llm_rewrite", "llm_diff", "llm_crossover", "llm_repair",
                     "llm_seed"]
    assert all(op.client is c.llm for op in c.operators if op.needs_llm) and c.llm.api_base == "http://127.0.0.1:1/v1"
    assert c.weights[names.index("llm_repair")] == 0 and c.steering.repair_probability == 0.5
    assert c.steering.offline_operators and c.steering.budget.usd is None
    assert c.weights[names.index("llm_seed")] == 0 and c.operators[-1].template == "seed.jinja"
    assert (c.run.llm_seeds, c.run.llm_seed_attempts) == (4, 12)


def test_proposals_prepared_beyond_the_requests_only_with_an_llm(tmp_path):
    offline = build(cfg(f"run.dir={tmp_path}", "run.proposals_per_island=16"))
    assert offline.run.proposals_held(llm=False) == 16
    llm = build(cfg(f"run.dir={tmp_path}", "run.proposals_per_island=16", "llm.model=openai/x"))
    assert llm.run.prepared == 4 and llm.run.proposals_held(llm=True) == 20  # a quarter by default
    assert build(cfg(f"run.dir={tmp_path}", "run.prepared_per_island=0")).run.proposals_held(llm=True) == 2
    assert build(cfg(f"run.dir={tmp_path}")).run.prepared == 1  # at least one


def test_meta_prompt_evolution_is_off_unless_enabled(tmp_path):
    c = build(cfg(f"run.dir={tmp_path}", "llm.model=openai/x"))
    assert c.steering.prompts is None
    c = build(cfg(f"run.dir={tmp_path}", "llm.model=openai/x", "llm.meta_prompt.enabled=true",
                  "llm.meta_prompt.evolve_every=8"))
    assert c.steering.prompts.evolve_every == 8 and len(c.steering.prompts.fragments) == 6


def test_llm_ensemble_budget_and_repair_come_from_config(tmp_path):
    c = build(cfg(f"run.dir={tmp_path}", "llm.model=[openai/a,openai/b]", "llm.budget.usd=2.5",
                  "llm.budget.calls=10", "operators.llm_repair.operator.probability=0",
                  "operators.constants.weight=0", "operators.param_crossover.weight=0",
                  "operators.dot_precision.weight=0", "operators.load_hints.weight=0", "operators.split_k.weight=0", "operators.persistent_tiles.weight=0", "operators.persistent_reduction.weight=0", "operators.split_reduction.weight=0", "operators.fuse_epilogue.weight=0"))
    assert c.llm.models == ["openai/a", "openai/b"] and c.steering.ensemble.models == c.llm.models
    assert (c.steering.budget.usd, c.steering.budget.calls, c.steering.budget.tokens) == (2.5, 10, None)
    assert "llm_repair" not in [op.name for op in c.operators] and not c.steering.offline_operators


@pytest.mark.parametrize("transport, api_base, chosen", [
    ("auto", "http://127.0.0.1:1/v1", "http"), ("auto", None, "litellm"),
    ("litellm", "http://127.0.0.1:1/v1", "litellm"), ("http", "http://127.0.0.1:1/v1", "http"),
])
def test_llm_transport_comes_from_config(transport, api_base, chosen, tmp_path):
    base = [f"llm.api_base={api_base}"] if api_base else []
    c = build(cfg(f"run.dir={tmp_path}", "llm.model=openai/x", f"llm.transport={transport}", *base))
    assert c.llm.transport == chosen


def test_public_config_keys_exist():
    c = cfg("run.dir=/tmp/x", "run.budget.evaluations=3", "task.path=/tmp/t.py", "llm.model=m",
            "llm.api_base=http://h", "evaluator.device=cpu", "ray.address=auto")
    assert c.run.budget.evaluations == 3 and c.ray.address == "auto"


@pytest.mark.parametrize("override, message", [
    ("islands.count=0", "at least 1"),
    ("run.budget.evaluations=-1", ">= 0"),
    ("run.prepared_per_island=-1", "prepared_per_island must be >= 0"),
    ("task.names=[nope]", "no task named nope"),
    ("operators.constants.weight=0 operators.param_crossover.weight=0 operators.dot_precision.weight=0 operators.load_hints.weight=0 "
     "operators.split_k.weight=0 operators.persistent_tiles.weight=0 operators.persistent_reduction.weight=0 operators.split_reduction.weight=0 operators.fuse_epilogue.weight=0", "no operator is enabled"),
    ("operators.sweep.weight=1", "sweeps new elites: set its max_children"),
    ("llm.model=openai/x llm.budget.usd=-1", "llm.budget.usd must be >= 0"),
    ("llm.model=openai/x llm.max_in_flight=0", "max_in_flight must be positive"),
    ("llm.model=openai/x llm.transport=http", "llm.transport=http needs llm.api_base"),
    ("llm.model=[a,a]", "list of distinct names"),
    ("llm.meta_prompt.enabled=true", "needs llm.model"),
    ("llm.model=openai/x llm.meta_prompt.enabled=true llm.meta_prompt.max_fragments=3", "below the 6 seed"),
    ("llm.model=openai/x operators.llm_repair.weight=1", "set its probability, not a weight"),
    ("llm.model=openai/x operators.llm_seed.weight=1", r"run.llm_seeds\): set its weight to 0"),
    ("llm.model=openai/x operators.llm_seed.operator.strategies=[]", "non-empty list of strategies"),
    ("run.llm_seed_attempts=-1", "run.llm_seeds and run.llm_seed_attempts must be >= 0"),
    ("llm.model=openai/x operators.llm_rewrite.operator.template=nope.jinja", "prompt template 'nope.jinja'"),
])
def test_bad_values_are_config_errors(override, message, tmp_path):
    with pytest.raises(EvoError, match=message):
        build(cfg(f"run.dir={tmp_path}", *override.split()))


# Every setting typed Literal[...] (evaluator.choices): a value outside it is refused, naming the key,
# the value and the values allowed.
@pytest.mark.parametrize("key, allowed", [
    ("evaluator.device", "auto, cpu or cuda"),
    ("evaluator.compile_timing", "cached or live"),
    ("evaluator.compile_mode", "default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs or null"),
    ("evaluator.time_shapes", "largest or all"),
    ("evaluator.containment", "auto, landlock or off"),
    ("evaluator.tolerance", "strict or kernelbench"),
    ("operators.dot_precision.operator.tolerance", "strict or kernelbench"),
    ("islands.migration.mode", "copy or move"),
    ("run.backend", "ray or local"),
    ("llm.transport", "auto, litellm or http"),
])
def test_a_value_outside_a_settings_choices_is_refused_by_name(key, allowed, tmp_path):
    llm = ["llm.model=openai/x"] if key.startswith("llm.") else []
    with pytest.raises(EvoError, match=re.escape(f"{key} must be {allowed}, not 'nope'")):
        build(cfg(f"run.dir={tmp_path}", f"{key}=nope", *llm))


def test_config_error_is_an_evo_error():
    assert issubclass(ConfigError, EvoError)


def test_descriptors_are_chosen_in_config(tmp_path):
    c = build(cfg(f"run.dir={tmp_path}", "archive.descriptors=[memory,compute,parallel]"))
    assert [d.name for d in c.descriptors] == ["memory", "compute", "parallel"]
    with pytest.raises(ConfigError, match="archive.descriptors"):
        build(cfg(f"run.dir={tmp_path}", "archive.descriptors=[colour]"))


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "selection").glob("*.yaml")))
def test_every_selection_strategy_builds(name, tmp_path):
    assert build(cfg(f"run.dir={tmp_path}", f"selection={name}")).selection.name == name


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "topology").glob("*.yaml")))
def test_every_migration_topology_builds(name, tmp_path):
    c = build(cfg(f"run.dir={tmp_path}", f"topology={name}", "islands.migration.mode=move",
                  "islands.migration.reseed_after=50"))
    assert c.migration.topology.name == name and (c.migration.mode, c.migration.reseed_after) == ("move", 50)


def test_migration_defaults_are_a_copying_ring_without_reseeding(tmp_path):
    c = build(cfg(f"run.dir={tmp_path}"))
    assert (c.migration.topology.name, c.migration.mode, c.migration.reseed_after) == ("ring", "copy", 0)
    with pytest.raises(ConfigError, match="copy or move"):
        build(cfg(f"run.dir={tmp_path}", "islands.migration.mode=swap"))


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_every_experiment_config_builds(name, tmp_path):
    c = build(cfg(f"experiment={name}", f"run.dir={tmp_path}"))
    assert c.run.budget_evaluations >= 1000 and c.island_count >= 4
    assert c.evaluator.device == "cuda" and {t.name for t in c.tasks} >= {"softmax", "matmul_fp16"}

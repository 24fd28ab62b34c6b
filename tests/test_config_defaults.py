"""One home per default: where conf/ gives a key that a typed constructor also gives a default, the
two agree.  `evo run` takes the YAML's value; code and tests that build the settings themselves take
the constructor's: a disagreement is a default that depends on how the engine was started."""
import dataclasses
import inspect
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

from evo.config import Components
from evo.loop.run_settings import RunSettings

CONF = Path(__file__).parents[1] / "conf"
# One YAML per implementation (the default config holds one of each); task/*.yaml are presets of one loader.
GROUPS = ("selection", "inspiration", "topology")


def composed(*overrides: str) -> DictConfig:
    with initialize_config_module(config_module="conf", version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def defaults_of(target) -> dict[str, object]:
    """The defaults a constructor gives: a dataclass's fields, else its signature's keyword defaults."""
    if dataclasses.is_dataclass(target):
        return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(target)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    return {name: p.default for name, p in inspect.signature(target).parameters.items() if p.default is not p.empty}


def _plain(value):
    value = OmegaConf.to_object(value) if OmegaConf.is_config(value) else value
    return list(value) if isinstance(value, tuple) else value


def compared(node: DictConfig, given: dict[str, object], path: str = "") -> dict[str, tuple[object, object]]:
    """Dotted key -> (the YAML's value, the constructor's default), for every key of ``node`` that a
    constructor gives a default.  A ``_target_`` node is held to its target's defaults, or, where its
    parent's default is an instance of that target (``evaluator.timing``), to that instance's values."""
    out = {}
    for key, value in node.items():
        where = f"{path}.{key}" if path else str(key)
        if str(key).startswith("_"):
            continue
        if isinstance(value, DictConfig) and "_target_" in value:
            target, default = get_object(value._target_), given.get(key)
            inner = ({f.name: getattr(default, f.name) for f in dataclasses.fields(default)}
                     if dataclasses.is_dataclass(default) and type(default) is target else defaults_of(target))
            out.update(compared(value, inner, where))
        elif isinstance(value, DictConfig) and key not in given:
            out.update(compared(value, {}, where))
        elif key in given:  # a value, or a map that is one (llm.prices: model -> prices)
            out[where] = (_plain(value), _plain(given[key]))
    return out


def run_keys(cfg: DictConfig) -> dict[str, tuple[object, object]]:
    """``run.*`` (no ``_target_``: evo.config builds it): RunSettings' fields (``run.budget.evaluations``
    is ``budget_evaluations``) and the run-wide switches that Components holds."""
    given = {**defaults_of(Components), **defaults_of(RunSettings)}
    flat = {name.replace(".", "_"): name for name in _leaves(OmegaConf.to_container(cfg.run))}
    values = OmegaConf.to_container(cfg.run)
    return {f"run.{dotted}": (_get(values, dotted), _plain(given[field])) for field, dotted in flat.items()
            if field in given}


def _leaves(node: dict, prefix: str = "") -> list[str]:
    return [name for key, value in node.items()
            for name in (_leaves(value, f"{prefix}{key}.") if isinstance(value, dict) and value else
                         [f"{prefix}{key}"])]


def _get(node: dict, dotted: str):
    for part in dotted.split("."):
        node = node[part]
    return node


def every_default(cfg: DictConfig) -> dict[str, tuple[object, object]]:
    return {**compared(cfg, {}), **run_keys(cfg)}


CHOICES = [()] + [(f"{group}={p.stem}",) for group in GROUPS for p in sorted((CONF / group).glob("*.yaml"))]


@pytest.mark.parametrize("overrides", CHOICES, ids=lambda o: o[0] if o else "config")
def test_yaml_and_constructor_defaults_agree(overrides):
    pairs = every_default(composed("run.dir=unused", *overrides))
    differ = [f"{key}: {yaml!r} in conf/, {code!r} in its constructor" for key, (yaml, code) in sorted(pairs.items())
              if yaml != code]
    assert not differ, "state each default once (conf/ or the constructor), or the same in both:\n" + "\n".join(differ)


def test_the_comparison_reaches_every_settings_class():
    keys = every_default(composed("run.dir=unused"))
    for key in ("run.budget.evaluations", "run.budget.per_task", "run.llm_seeds", "evaluator.pipeline",
                "evaluator.timing.warmup_s", "evaluator.cpu_timing.batch", "islands.migration.mode",
                "ray.placement_timeout_s", "llm.transport", "llm.budget.usd", "llm.meta_prompt.evolve_every",
                "operators.llm_diff.operator.max_inspirations", "operators.sweep.operator.max_children"):
        assert key in keys, key


def test_a_disagreement_is_found():
    cfg = composed("run.dir=unused", "run.budget.evaluations=7", "evaluator.cpu_timing.batch=5")
    differ = {k for k, (yaml, code) in every_default(cfg).items() if yaml != code}
    assert differ == {"run.budget.evaluations", "evaluator.cpu_timing.batch"}

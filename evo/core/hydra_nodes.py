"""Hydra config nodes made into objects, and the stored configs of runs made before a module moved.

A run dir keeps the config it ran with (``config.yaml``), ``_target_`` paths included: a run made
before the domain model moved into ``evo.core`` (and the loop and views into ``evo.loop`` and
``evo.views``) names ``evo.task.load_tasks`` or ``evo.selection.Uniform``.  Resume, status, report
and export read such a config through :func:`current_targets`, so the run goes on.
"""
from __future__ import annotations

import re

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from evo.core.errors import ConfigError, EvoError

# module (formerly evo.<module>) -> the package it lives in now
MOVED = {**dict.fromkeys(("errors", "task", "program", "kernel_source", "kernel_facts", "descriptors", "layouts",
                          "selection", "inspiration", "shape_buckets"), "core"),
         **dict.fromkeys(("controller", "scheduler", "pacing", "feedback", "seeding", "arrivals", "startup",
                          "loop_state", "late_baselines", "run_settings", "seed_store"), "loop"),
         **dict.fromkeys(("run_view", "summary", "report", "export", "fast_p", "progress"), "views")}
_OLD_TARGET = re.compile(r"(_target_:\s*['\"]?)evo\.(" + "|".join(MOVED) + r")\.")


def current_targets(config_yaml: str) -> str:
    """A stored config's text with each ``_target_`` of a moved module pointing where it lives now."""
    return _OLD_TARGET.sub(lambda m: f"{m.group(1)}evo.{MOVED[m.group(2)]}.{m.group(2)}.", config_yaml)


def instantiate_node(node, what: str):
    """Instantiate one ``_target_`` node, turning failures into clear messages."""
    try:
        return instantiate(node, _convert_="all")
    except InstantiationException as exc:
        cause = exc.__cause__
        while isinstance(cause, InstantiationException) and cause.__cause__ is not None:
            cause = cause.__cause__
        if isinstance(cause, EvoError):
            raise cause from None
        raise ConfigError(f"invalid {what} config: {cause or exc}") from None

"""Settings that take one of a few values: typed ``Literal[...]`` where they are declared, and checked
by one helper with an error that names the key, the value given and the values allowed.

Standard library only, like ``evaluator.result``: every package of the engine may import it.
"""
from __future__ import annotations

import dataclasses
import functools
import types
from typing import Literal, Union, get_args, get_origin, get_type_hints

# Where a task sets no ATOL/RTOL (evaluator.tolerance; operators.precision tells TF32 apart by it).
Tolerance = Literal["strict", "kernelbench"]


def allowed(hint) -> tuple:
    """The values a ``Literal[...]`` type allows (with None for ``Literal[...] | None``); () for any other type."""
    if get_origin(hint) is Literal:
        return get_args(hint)
    if get_origin(hint) in (Union, types.UnionType):
        values = tuple(v for arg in get_args(hint) for v in allowed(arg))
        return values + (None,) if values and type(None) in get_args(hint) else values
    return ()


def one_of(key: str, value: object, values: tuple, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` unless ``value`` is among ``values``: "evaluator.device must be auto, cpu or cuda,
    not 'tpu'" (None is written null, as in the config)."""
    if value not in values:
        names = ["null" if v is None else str(v) for v in values]
        listed = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
        raise error(f"{key} must be {listed}, not {value!r}")


@functools.cache
def _choice_fields(cls: type) -> tuple[tuple[str, tuple], ...]:
    hints = get_type_hints(cls)
    return tuple((f.name, values) for f in dataclasses.fields(cls) if (values := allowed(hints[f.name])))


def check_choices(settings, prefix: str, error: type[Exception] = ValueError) -> None:
    """Check every ``Literal``-typed field of the dataclass ``settings`` (its ``__post_init__`` calls this);
    ``prefix``: where its keys are in the config (``evaluator``, ``islands.migration``)."""
    for name, values in _choice_fields(type(settings)):
        one_of(f"{prefix}.{name}", getattr(settings, name), values, error)

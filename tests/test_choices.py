"""evaluator.choices: a setting typed Literal[...] is checked by one helper, whose error names the key,
the value given and the values allowed."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import pytest

from evaluator.choices import Tolerance, allowed, check_choices, one_of
from evaluator.settings import TOLERANCES
from evo.core.errors import ConfigError


@dataclass(frozen=True)
class Settings:
    colour: Literal["red", "green"] = "red"
    shade: Literal["light", "dark"] | None = None
    size: int = 1
    name: str = "x"

    def __post_init__(self):
        check_choices(self, "paint")


def test_literal_fields_are_checked_and_others_left_alone():
    assert Settings(colour="green", shade="dark", size=5, name="anything").colour == "green"
    with pytest.raises(ValueError, match=r"^paint.colour must be red or green, not 'blue'$"):
        Settings(colour="blue")
    with pytest.raises(ValueError, match=r"^paint.shade must be light, dark or null, not 'pale'$"):
        Settings(shade="pale")


def test_allowed_reads_a_literal_also_inside_an_optional():
    assert allowed(Literal["a", "b"]) == ("a", "b") and allowed(Literal["a"] | None) == ("a", None)
    assert allowed(int) == () and allowed(str | None) == ()


def test_one_of_raises_the_error_asked_for():
    one_of("run.backend", "ray", ("ray", "local"), ConfigError)
    with pytest.raises(ConfigError, match=r"^run.backend must be ray or local, not 'dask'$"):
        one_of("run.backend", "dask", ("ray", "local"), ConfigError)
    with pytest.raises(ValueError, match=r"^k must be only, not 2$"):
        one_of("k", 2, ("only",))


def test_the_tolerance_choices_are_the_tolerances_known():
    assert list(TOLERANCES) == list(get_args(Tolerance))

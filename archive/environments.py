"""The environment that measured an evaluation, one ``environments`` row per distinct one.

An exported kernel's manifest carries the GPU, driver, CUDA, torch, triton,
Python and engine versions of the evaluation that timed it, not those of the
machine that exports it.
"""
from __future__ import annotations

from sqlalchemy import insert, select

from archive import statements as sql

FIELDS = ("gpu", "driver", "cuda", "torch", "triton", "python", "engine")


def environment_row(environment: dict, engine: str) -> dict:
    """The row for ``EvalResult.extra["environment"]`` measured under engine version ``engine``."""
    row = {k: str(environment.get(k) or "")[:128] for k in FIELDS}
    row["engine"] = row["engine"] or engine
    return row


def environment_id(c, row: dict, cache: dict[tuple, int]) -> int:
    """The id of ``row`` in ``environments``, inserted the first time it is seen."""
    key = tuple(row[k] for k in FIELDS)
    if key not in cache:
        found = c.scalar(select(sql.ENVIRONMENTS.c.id).where(*(sql.ENVIRONMENTS.c[k] == row[k] for k in FIELDS)))
        cache[key] = found if found is not None else c.execute(insert(sql.ENVIRONMENTS), row).inserted_primary_key[0]
    return cache[key]

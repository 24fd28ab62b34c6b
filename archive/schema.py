"""Engines per dialect, and the schema's versions: create, upgrade or refuse a database.

The schema is versioned with Alembic revisions shipped in ``archive/migrations``
(revision ``0001`` is schema 1, ...).  :func:`upgrade` runs at every start-up,
before anything else touches the database, in one transaction:

- an empty database gets every revision (the tables come from the migrations);
- a database made before migrations existed (tables, no ``alembic_version``) is
  stamped with the version its ``meta`` row records, then upgraded;
- a database newer than this engine (a ``meta`` version or a revision it does
  not know) is refused with :class:`SchemaError`, and nothing is written.
"""
from __future__ import annotations

import logging
from pathlib import Path

# Alembic narrates its plugins and every revision at INFO (from import on); a run's console
# and logs are not the place for it.
logging.getLogger("alembic").setLevel(logging.WARNING)

from alembic import command  # noqa: E402
from alembic.config import Config  # noqa: E402
from alembic.runtime.migration import MigrationContext  # noqa: E402
from alembic.script import ScriptDirectory  # noqa: E402
from sqlalchemy import create_engine, event, inspect, select, update  # noqa: E402
from sqlalchemy.engine import Connection, Engine  # noqa: E402

from archive import statements as sql  # noqa: E402
from archive.models import SCHEMA_VERSION  # noqa: E402

MIGRATIONS = Path(__file__).with_name("migrations")


class SchemaError(Exception):
    """The database's schema is not one this engine can use."""


def revision(version: int) -> str:
    return f"{version:04d}"


def make_engine(url: str, *, busy_timeout_s: float = 10.0, transactional_ddl: bool = False) -> Engine:
    """An engine with the dialect's settings (SQLite: WAL and pragmas, a busy timeout).

    ``transactional_ddl``: on SQLite, begin every transaction explicitly, so that
    schema changes roll back too (the driver otherwise runs DDL outside any).
    """
    if not url.startswith("sqlite"):
        return create_engine(url)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": busy_timeout_s})
    event.listen(engine, "connect", sql.sqlite_pragmas)
    if transactional_ddl:
        event.listen(engine, "connect", _driver_autocommit)
        event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN"))
    return engine


def _driver_autocommit(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None  # SQLAlchemy's BEGIN (above) starts each transaction


def _config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def upgrade(url: str, *, busy_timeout_s: float = 10.0) -> None:
    """Bring the database at ``url`` to this engine's schema, or raise :class:`SchemaError`."""
    engine = make_engine(url, busy_timeout_s=busy_timeout_s, transactional_ddl=True)
    try:
        with engine.connect() as conn, conn.begin():
            _upgrade(conn)
    finally:
        engine.dispose()


def _upgrade(conn: Connection) -> None:
    tables = set(inspect(conn).get_table_names())
    recorded = conn.scalar(select(sql.META.c.value).where(sql.META.c.key == "schema_version")) \
        if "meta" in tables else None
    has_row = recorded is not None
    if has_row and int(recorded) > SCHEMA_VERSION:
        raise SchemaError(f"schema version {recorded}, newer than this engine's {SCHEMA_VERSION}")
    config = _config(conn)
    scripts = ScriptDirectory.from_config(config)
    current = MigrationContext.configure(conn).get_current_revision()
    if current is not None:
        try:
            scripts.get_revision(current)
        except Exception:  # alembic raises several kinds for an unknown revision
            raise SchemaError(f"schema revision {current}, newer than this engine's "
                              f"{revision(SCHEMA_VERSION)}") from None
    elif "programs" in tables:  # made before the schema had migrations
        if not has_row:  # killed between creating the tables and recording the version
            columns = {c["name"] for c in inspect(conn).get_columns("evaluations")}
            recorded = 2 if "roofline_fraction" in columns else 1
        command.stamp(config, revision(int(recorded)))
    if current != scripts.get_current_head():
        command.upgrade(config, "head")
    if not has_row:
        conn.execute(sql.META.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
    elif int(recorded) != SCHEMA_VERSION:  # a legacy database, stamped above
        conn.execute(update(sql.META).where(sql.META.c.key == "schema_version").values(value=str(SCHEMA_VERSION)))

"""Alembic environment: migrations run on the connection the archive hands over.

``archive.schema`` puts an open connection (inside its transaction) in
``config.attributes["connection"]``; there is no offline (SQL script) mode.
"""
from alembic import context

from archive.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()

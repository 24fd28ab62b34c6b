"""Alembic migrations of the archive schema, run by :func:`archive.schema.upgrade` at start-up.

Each revision is one schema version (``versions/0001_*.py`` is schema 1, ...);
no ``alembic.ini`` is needed, the script location is this package.  To change
the schema: edit ``archive/models.py``, bump ``SCHEMA_VERSION``, and add the
next revision by hand (``revision = "0003"``, ``down_revision = "0002"``);
``tests/test_schema.py`` checks that the migrations build exactly the models.
"""

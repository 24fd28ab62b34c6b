"""archive: the run's memory, in SQL through SQLAlchemy.

Public names:
    Archive, ArchiveError, Insert -- the store (``archive.store``)

Owns the database schema and every query.  May import ``evo`` domain modules
(``evo.core.program``, ``evo.core.descriptors``, ``evo.core.kernel_source``, ``evo.core.errors``) and
``evaluator.result``; never Ray, operators or islands.
"""
from archive.store import Archive, ArchiveError, Insert

__all__ = ["Archive", "ArchiveError", "Insert"]

"""archive: the run's memory, in SQL through SQLAlchemy.

Public names:
    Archive, ArchiveError, Insert -- the store (``archive.store``)

Owns the database schema and every query.  May import ``evo`` domain modules
(``evo.program``, ``evo.descriptors``, ``evo.kernel_source``, ``evo.errors``) and
``evaluator.result``; never Ray, operators or islands.
"""
from archive.store import Archive, ArchiveError, Insert

__all__ = ["Archive", "ArchiveError", "Insert"]

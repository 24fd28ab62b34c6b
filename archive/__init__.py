"""archive: the run's memory, in SQL through SQLAlchemy.

Public names:
    Archive, ArchiveError, Insert -- the store (``archive.store``)
    Descriptor, describe          -- MAP-Elites cell descriptors

Owns the database schema and every query.  May import ``evo`` domain modules
(``evo.program``, ``evo.kernel_source``, ``evo.errors``) and
``evaluator.result``; never Ray, operators or islands.
"""
from archive.descriptors import DEFAULT_DESCRIPTORS, Descriptor, describe
from archive.store import Archive, ArchiveError, Insert

__all__ = ["DEFAULT_DESCRIPTORS", "Archive", "ArchiveError", "Descriptor", "Insert", "describe"]

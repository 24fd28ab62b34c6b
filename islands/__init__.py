"""islands: island populations and where they (and the evaluators) run.

Public names:
    Island                  -- an island's RNG stream and operator mix (plain class)
    MigrationSettings, ring -- when and where elites migrate
    LocalBackend            -- islands and evaluators in this process (threads)
    RayBackend, RaySettings -- the same as Ray actors (``islands.ray_backend``; imports Ray)

May import ``operators``, ``evaluator`` and ``evo`` domain modules; only
``ray_backend`` imports Ray, and only when it is used.
"""
from islands.backend import LocalBackend
from islands.island import Island
from islands.migration import MigrationSettings, ring

__all__ = ["Island", "LocalBackend", "MigrationSettings", "ring"]

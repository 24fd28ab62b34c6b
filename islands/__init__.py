"""islands: island populations and where they (and the evaluators) run.

Public names:
    Island                  -- an island's RNG stream and operator mix (plain class)
    MigrationSettings       -- when elites migrate, how many, copied or moved, and reseeding
    Topology, Ring, FullyConnected, RandomPartner, round_rng -- which islands send to which
    Stagnation              -- which islands have stopped improving (derived from the archive)
    Backend                 -- what the run loop asks of islands and evaluators, wherever they run
    LocalBackend            -- islands and evaluators in this process (threads)
    RayBackend, RaySettings -- the same as Ray actors (``islands.ray_backend``; imports Ray)

May import ``operators``, ``evaluator`` and ``evo`` domain modules; only
``ray_backend`` imports Ray, and only when it is used.
"""
from islands.backend import Backend, LocalBackend
from islands.island import Island
from islands.migration import FullyConnected, MigrationSettings, RandomPartner, Ring, Topology, round_rng
from islands.stagnation import Stagnation

__all__ = ["Backend", "FullyConnected", "Island", "LocalBackend", "MigrationSettings", "RandomPartner", "Ring", "Stagnation",
           "Topology", "round_rng"]

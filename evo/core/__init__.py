"""evo.core: the domain model, the engine's ground floor.

Tasks and their problem files, programs, kernel sources and the facts read from them, MAP-Elites
descriptors and cell layouts, parent selection and inspiration, shape buckets, the run directory's
files and lock, the errors the CLI reports.  ``archive``, ``operators``, ``islands`` and the
application above (``evo.loop``, ``evo.views``, ``evo.cli``) import it; it imports none of them
(only ``evaluator``'s result types).
"""

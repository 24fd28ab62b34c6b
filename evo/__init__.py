"""evo: the domain model, configuration, run controller and CLI of the engine.

Public names:
    Task, load_tasks      -- problem files and built-in suites (``evo.core.task``)
    EvoError              -- base class of the errors the CLI reports cleanly
"""
from evo.core.errors import EvoError
from evo.core.task import Task, load_tasks

__all__ = ["EvoError", "Task", "load_tasks"]

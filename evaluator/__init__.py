"""evaluator: scores candidate kernels for correctness and speed, in sandboxes.

Public names:
    Evaluator, EvaluatorSettings, TimingSettings -- the host-side API
    EvalResult, Status                           -- what an evaluation returns
    Preparation, PreparedTask                    -- a task to check (and seed) at start-up, and how it went
    TaskCheck, DerivedSeed, WorkerFailure        -- typed replies of the sandbox (``evaluator.replies``)
    resolve_device                               -- auto|cpu|cuda to a concrete device

Owns the worker processes (``worker``, ``sandbox``, ``containment``) and the procedure run in
them (``harness``, ``compare``, ``timing``).  Imports nothing from the other
packages of the engine.
"""
from evaluator.device import resolve_device
from evaluator.evaluator import Evaluator, EvaluatorSettings, TimingSettings
from evaluator.preparation import Preparation, PreparedTask
from evaluator.replies import DerivedSeed, TaskCheck, WorkerFailure
from evaluator.result import EvalResult, Status

__all__ = ["DerivedSeed", "EvalResult", "Evaluator", "EvaluatorSettings", "Preparation", "PreparedTask", "Status",
           "TaskCheck", "TimingSettings", "WorkerFailure", "resolve_device"]

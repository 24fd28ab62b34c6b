"""Stand-ins shared by the tests (and the experiments that drive the engine without a sandbox).

    StandInEvaluator -- an evaluator's interface, instant: a subclass says what a candidate scores
    StandInBackend   -- the whole of islands.backend.Backend, nothing prepared: a subclass proposes
                        and evaluates
    done             -- a finished future holding a value

Modules: ``llm_server`` (the scripted OpenAI-compatible server), ``scale_writer`` (a scripted LLM that
writes kernels for x * SCALE tasks), ``candidates``, ``hostile``, ``integrity_cheats``.
"""
from tests.support.fakes import StandInBackend, StandInEvaluator, done

__all__ = ["StandInBackend", "StandInEvaluator", "done"]

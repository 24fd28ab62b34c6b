"""islands.backend.Backend: what the run loop asks of islands and evaluators, one protocol for all."""
import inspect
from pathlib import Path

from evaluator import Evaluator, EvaluatorSettings
from islands import Backend, Island, LocalBackend
from operators import TunableConstantMutation
from tests.support import StandInBackend, StandInEvaluator

ROOT = Path(__file__).resolve().parent.parent
MEMBERS = [name for name in dir(Backend) if not name.startswith("_")]


def test_the_protocol_names_what_the_run_loop_uses():
    assert set(MEMBERS) == {"island_count", "evaluator_count", "slot_count", "races", "propose", "evaluate",
                            "settled_baselines", "placement", "check_task", "compile_seed", "prepare",
                            "prepare_stream", "close"}


def test_the_local_backend_implements_it_and_counts_slots_and_evaluators_apart():
    evaluators = [Evaluator(EvaluatorSettings(device="cpu", timeout_s=60), "cpu") for _ in range(2)]
    backend = LocalBackend([Island(0, [TunableConstantMutation()], [1.0], seed=0)], lambda i: evaluators[i], 2)
    try:
        assert isinstance(backend, Backend)
        assert backend.evaluator_count == 2 and backend.slot_count == sum(e.slots for e in evaluators)
        assert backend.races and backend.placement() is None
    finally:
        backend.close()


def test_the_ray_backend_and_the_stand_ins_define_every_member():
    from islands.ray_backend import RayBackend

    for cls in (RayBackend, StandInBackend):
        assert [m for m in MEMBERS if not hasattr(cls, m)] == [], cls
    # A stand-in evaluator answers everything a backend asks of an evaluator.
    asked = {"evaluate", "settled_baselines", "check_task", "compile_seed", "prepare_stream", "close", "slots",
             "settings"}
    assert {m for m in asked if not hasattr(StandInEvaluator, m)} == set()
    # Ray adds ``_ray_trace_ctx`` to the methods of a class it makes an actor, in place: a test of
    # the Ray backend before this one in the same process leaves Evaluator's so
    def parameters(method) -> list[str]:
        return [p for p in inspect.signature(method).parameters if p != "_ray_trace_ctx"]

    assert parameters(StandInEvaluator.evaluate) == parameters(Evaluator.evaluate)


def test_the_run_loop_never_probes_a_backend():
    for path in (ROOT / "evo").glob("*.py"):
        text = path.read_text()
        for probe in ("getattr(backend", "hasattr(backend", "getattr(self.backend", "hasattr(self.backend"):
            assert probe not in text, f"{path.name}: {probe}"
    assert "stand-in" not in (ROOT / "islands" / "backend.py").read_text()  # no test seam in production code

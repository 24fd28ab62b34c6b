"""Timed calls' outputs poisoned after their windows: the memory they leave holds no answer."""
import torch

from evaluator.invoke import Outcome
from evaluator.spent_outputs import PoisonedAfter, poison, spared_storages
from evaluator.timed_checks import TimedCalls
from evaluator.timing import time_interleaved


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(8))
        self.register_buffer("offset", torch.zeros(8))
        self.cached = torch.full((8,), 3.0)  # a plain tensor attribute: the model's state too

    def forward(self, x):
        return x * self.weight + self.offset


def test_poison_fills_each_storage_once_with_nan_or_minus_one_and_spares_what_it_is_told():
    floats, ints, kept = torch.randn(6), torch.arange(4, dtype=torch.int32), torch.randn(3)
    poison([floats[2:4], (ints, 7), kept, floats], spared={kept.untyped_storage().data_ptr()})
    assert torch.isnan(floats).all() and (ints == -1).all() and not torch.isnan(kept).any()
    poison([torch.empty(0), torch.eye(3).to_sparse()], spared=set())  # no storage (of its own): nothing to fill


def test_a_baselines_output_is_poisoned_after_its_window_but_never_its_models_state_or_inputs():
    model, x = _Scaled(), torch.randn(8)
    sets = [[x]]
    spared = spared_storages(sets, model)
    assert {t.untyped_storage().data_ptr() for t in (model.weight, model.offset, model.cached, x)} <= spared
    fresh = PoisonedAfter(lambda: model(x), spared)
    out = fresh()
    assert torch.allclose(out, x) and fresh.last is out
    fresh.after()
    assert torch.isnan(out).all() and fresh.last is None
    for state in (lambda: model.weight, lambda: model.cached, lambda: x):  # returned as they are
        returned = PoisonedAfter(state, spared)
        held = returned().clone()
        returned.after()
        assert torch.equal(state(), held)


def test_the_timer_poisons_every_timed_output_once_its_window_has_closed():
    """The candidate's outputs (in ``TimedCalls.after``) and the baseline's (its ``after``), each after its
    own window: inside it, the values are the call's."""
    x = torch.randn(64)
    outputs, inside = [], []

    def invoker(inputs, mode):
        out = inputs[0] * 2.0
        outputs.append(out)
        return Outcome(output=out, launched=1)

    timed = TimedCalls(invoker, [[x]], "cpu")

    def candidate():
        out = timed()
        inside.append(bool(torch.isnan(out).any()))
        return out

    reference = PoisonedAfter(lambda: x * 2.0, spared_storages([[x]]))
    returned = []
    original = reference.call
    reference.call = lambda: returned.append(original()) or returned[-1]
    time_interleaved(candidate, {"reference": reference}, "cpu", warmup=1, reps=4, budget_s=10,
                     before_call=timed.before, after_call=timed.after)
    assert len(outputs) == 5 and not any(inside)
    assert all(torch.isnan(out).all() for out in outputs + returned)
    assert not torch.isnan(x).any()  # the input set spared

"""Which dispatcher tables the state checks read, and that a kernel registered over one shows."""
import torch

from evaluator.dispatcher_state import HARNESS_OPERATORS, Recorder, tables_digest


def _reference():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())


def test_the_recorder_names_composite_operators_and_their_decompositions():
    recorder = Recorder()
    with recorder(), torch.no_grad():
        _reference()(torch.randn(2, 4))
    operators = recorder.operators()
    assert {"aten::linear", "aten::addmm", "aten::gelu"} <= operators  # linear is composite: addmm below it
    assert HARNESS_OPERATORS <= operators


def test_a_kernel_registered_over_a_reached_operator_changes_the_digest_and_an_unreached_one_does_not():
    recorder = Recorder()
    with recorder(), torch.no_grad():
        _reference()(torch.randn(2, 4))
    operators = recorder.operators()
    before, everything = tables_digest(operators), tables_digest()
    library = torch.library.Library("aten", "IMPL")
    try:
        library.impl("gelu", lambda x, approximate="none": torch.zeros_like(x), "CPU")
        assert tables_digest(operators) != before
        assert tables_digest() != everything
    finally:
        library._destroy()
    assert tables_digest(operators) == before
    library = torch.library.Library("aten", "IMPL")
    try:
        library.impl("cosh", lambda x: torch.zeros_like(x), "CPU")  # not reached: the reference is unchanged
        assert "aten::cosh" not in operators and tables_digest(operators) == before
    finally:
        library._destroy()

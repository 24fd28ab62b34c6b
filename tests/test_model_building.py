"""How the harness makes the reference and candidate models (evaluator.harness)."""


def test_the_reference_is_made_on_its_device_unless_its_constructor_needs_the_cpu():
    """``torch.device`` factories (no CPU initialisation of large weights, no copy), else as KernelBench:
    made on the CPU and moved (here the meta device stands in for a GPU)."""
    import types

    import torch

    from evaluator.harness import build_reference

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

    class NeedsCpu(Plain):
        def __init__(self):
            super().__init__()
            self.scale = float(torch.ones(1).numpy()[0])  # a meta (or CUDA) tensor has no numpy()

    made = []
    for cls in (Plain, NeedsCpu):
        problem = types.SimpleNamespace(Model=cls, get_init_inputs=lambda: [])
        made.append(build_reference(problem, "meta"))
    (plain, plain_on_device), (needs_cpu, needs_cpu_on_device) = made
    assert plain_on_device and plain.linear.weight.is_meta and not plain.training
    assert not needs_cpu_on_device and needs_cpu.linear.weight.is_meta and needs_cpu.scale == 1.0

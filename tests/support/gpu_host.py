"""``evo.runner.run_search`` as on a host with one GPU, without one: the device, the environment
(``environment["now"]``, which a test may change between starts), containment and the backend
(``backend_class`` over threads, every evaluation by ``make_evaluator()``) stood in for."""
from evo import runner
from islands import Island


def pretend_gpu_host(monkeypatch, backend_class, make_evaluator, environment: dict) -> None:
    def make_backend(c, device, gpus, resume_count):
        islands = [Island(0, c.operators, c.weights, c.run.seed, resume_count, c.descriptors)]
        return backend_class(islands, lambda i: make_evaluator(), 1)

    monkeypatch.setattr(runner, "resolve_device", lambda wanted: ("cuda", 1))
    monkeypatch.setattr(runner, "gpu_environment", lambda: environment["now"])
    monkeypatch.setattr(runner, "probe", lambda **kw: {"processes": "shared", "filesystem": "shared",
                                                       "network": "shared", "why": {}})
    monkeypatch.setattr(runner, "make_backend", make_backend)

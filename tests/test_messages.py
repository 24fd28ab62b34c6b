"""The host's requests to a sandbox worker are typed (evaluator.messages.WorkerRequest)."""
import dataclasses

import pytest

from evaluator.messages import WorkerRequest


def _request(**extra) -> WorkerRequest:
    return WorkerRequest(kind="evaluate", task_name="t", task_source="src", device="cpu", seeds=[0, 1],
                         cpu_max_numel=10, timing={"reps": 3}, timed_checks=None, noise_floor=0.01,
                         roofline_limit=1.2, roofline_peaks=None, memory_limit_mb=100, gpu_memory_fraction=0.9,
                         isolate_network=True, containment="auto", compile_baseline=None, time_shapes="largest",
                         tolerance={"float32": [1e-4, 1e-4]}, extra=extra)


def test_a_request_travels_as_the_keys_the_harness_reads():
    message = _request(candidate_source="k", race=None, roofline_peaks={"bytes_per_s": 1.0}).as_message()
    fields = {f.name for f in dataclasses.fields(WorkerRequest)} - {"extra"}
    assert fields <= set(message) and message["candidate_source"] == "k"
    assert message["roofline_peaks"] == {"bytes_per_s": 1.0}  # the peaks measured for this call
    with pytest.raises(ValueError, match="cannot override"):
        _request(task_source="another").as_message()
    with pytest.raises(dataclasses.FrozenInstanceError):
        _request().kind = "settle"

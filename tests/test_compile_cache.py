"""Triton's compile cache (EvaluatorSettings.share_compile_cache): the pipeline's workers of a device
share one, so that a kernel a child keeps unchanged from its parent is compiled once, not once per
worker; the torch.compile baseline's worker keeps its own, out of candidates' reach."""
import os
from pathlib import Path

import pytest

from evaluator import Evaluator, EvaluatorSettings
from tests.test_warm_start import warmed


def _triton_cache_of(pid: int) -> str:
    """TRITON_CACHE_DIR as the running worker process sees it."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"TRITON_CACHE_DIR="))


def _started(evaluator: Evaluator) -> list:
    workers = [*warmed(evaluator).workers, evaluator.baselines.worker]
    assert all(w.pid() for w in workers), "the warm start did not start every worker"
    return [_triton_cache_of(w.pid()) for w in workers]


@pytest.mark.slow
def test_the_pipeline_shares_one_cache_and_the_baseline_keeps_its_own(tmp_path):
    settings = EvaluatorSettings(device="cpu", pipeline=3, warm_start=True, compile_baseline=True)
    evaluator = Evaluator(settings, "cpu", scratch_root=str(tmp_path))
    try:
        *pipeline, baseline = _started(evaluator)
        assert pipeline == [evaluator.compile_cache] * 3 and os.path.isdir(evaluator.compile_cache)
        assert baseline != evaluator.compile_cache and baseline.startswith(str(evaluator.baselines.worker.scratch))
    finally:
        evaluator.close()
    assert not os.path.exists(evaluator.compile_cache)  # removed with the evaluator


@pytest.mark.slow
def test_without_sharing_or_with_a_configured_cache_each_worker_gets_what_it_says(tmp_path):
    settings = EvaluatorSettings(device="cpu", pipeline=2, warm_start=True, compile_baseline=True,
                                 share_compile_cache=False)
    evaluator = Evaluator(settings, "cpu", scratch_root=str(tmp_path))
    try:
        caches = _started(evaluator)
        assert evaluator.compile_cache is None and len(set(caches)) == 3
    finally:
        evaluator.close()
    configured = str(tmp_path / "cache")
    settings = EvaluatorSettings(device="cpu", pipeline=2, warm_start=True, compile_baseline=True, cache_dir=configured)
    evaluator = Evaluator(settings, "cpu", scratch_root=str(tmp_path))
    try:
        assert _started(evaluator) == [configured] * 3 and evaluator.compile_cache is None
    finally:
        evaluator.close()


WRITE_INTO_THE_CACHE = '''
_os = __import__("o" + "s")
with open(_os.path.join(_os.environ["TRITON_CACHE_DIR"], "written-by-a-candidate"), "w") as _f:
    _f.write("compiled")
'''


@pytest.mark.slow
def test_a_contained_candidate_can_still_write_into_the_shared_cache(tmp_path):
    """Triton compiles into the shared cache from inside the candidate's containment, which
    leaves the filesystem read-only but for the scratch and the cache (where the machine allows)."""
    from evaluator import Status
    from evaluator.containment import describe, probe
    from tests.support.candidates import TASK, candidate

    state = probe(mode="auto", cuda=False)
    settings = EvaluatorSettings(device="cpu", pipeline=2, containment="auto", compile_baseline=False)
    evaluator = Evaluator(settings, "cpu", scratch_root=str(tmp_path))
    try:
        result = evaluator.evaluate("double", TASK, WRITE_INTO_THE_CACHE + candidate())
        assert result.status is Status.CORRECT, result.reason
        assert (Path(evaluator.compile_cache) / "written-by-a-candidate").read_text() == "compiled"
    finally:
        evaluator.close()
    if not state["filesystem"].startswith("read-only"):
        pytest.skip(f"the filesystem is not read-only for candidates here, nothing was contained: {describe(state)}")

"""Shared fixtures.  CPU tests run Triton through its interpreter."""
from __future__ import annotations

import os
import shutil

# Before anything imports triton or litellm.
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pytest  # noqa: E402

from evo.core.task import load_tasks  # noqa: E402
from tests.support import triton_language  # noqa: E402


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    from evaluator.device import cuda_device_count

    return cuda_device_count() > 0


def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _has_gpu():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _triton_language_as_it_was():
    """A test's interpreted kernels leave nothing patched for the next test's compiled ones."""
    yield
    triton_language.restore()


@pytest.fixture(scope="session")
def builtin_tasks():
    return {t.name: t for t in load_tasks("default")}


@pytest.fixture(scope="session")
def cpu_evaluator():
    from evaluator import Evaluator, EvaluatorSettings

    evaluator = Evaluator(EvaluatorSettings(device="cpu", timeout_s=60), "cpu")
    yield evaluator
    evaluator.close()


@pytest.fixture(scope="session")
def small_run(tmp_path_factory):
    """A finished CPU run of the quick suite (4 children), made once; tests copy it before changing it."""
    import subprocess
    import sys

    run_dir = tmp_path_factory.mktemp("small_run") / "run"
    out = subprocess.run([sys.executable, "-m", "evo.cli", "run", f"run.dir={run_dir}", "run.budget.evaluations=4",
                          "task=quick", "run.backend=local", "evaluator.device=cpu", "run.progress=false"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return run_dir


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL server (tests/postgres.py), or a skip saying why there is none."""
    from tests.postgres import PostgresServer, unavailable

    reason = unavailable()
    if reason:
        pytest.skip(f"PostgreSQL contract tests skipped: {reason}")
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A new, empty archive database: SQLite in tmp_path, then a PostgreSQL one where available."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'archive.db'}"
    return request.getfixturevalue("postgres").new_database()


@pytest.fixture(scope="session")
def timed_run(small_run, tmp_path_factory):
    """A CVT run whose kernels were timed on every shape set (tests/timed_run.py): (run dir, program ids)."""
    from tests.timed_run import build_timed_run

    run_dir = tmp_path_factory.mktemp("timed_run") / "run"
    return run_dir, build_timed_run(run_dir, small_run)

"""What the host sent, run and read as it was sent (inside the sandboxed child): the task's and the
candidate's modules compiled from the text given, and the request checked against its digest."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

from evaluator.calls import Failure
from evaluator.result import Status


def load_module(source: str, scratch: Path, prefix: str):
    """``source`` run as a module named ``<prefix>_<digest>``, its file written to ``scratch``."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    path = scratch / f"{prefix}_{digest}.py"
    path.write_text(source, encoding="utf-8")  # read back by inspect: Triton's JIT parses its kernels' source
    name = f"{prefix}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit and dataclasses look modules up by name
    # compiled from the text given, never from a cached .pyc (the loader would take one a candidate
    # planted, unchecked against the source): what runs is what the host sent
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102
    return module


def request_digest(request: dict) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, default=repr).encode()).hexdigest()


def request_unchanged(request: dict, asked: str, when: str) -> None:
    """The request as the host sent it: the tolerance, the timing and the checks' settings are read
    from it after the candidate's module has run, which could reach it through the harness's frames."""
    if request_digest(request) != asked:
        raise Failure(Status.REJECTED, f"the candidate changed the evaluation's request ({when})")

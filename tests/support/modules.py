"""A Python file loaded as a module, its Triton kernels compiled for the GPU where asked."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


def load_module(path: Path, name: str | None = None, *, compiled: bool = True, register: bool = False):
    """The module in ``path`` (Triton reads a kernel's source from its file).  ``compiled``: its
    kernels are made for the GPU, the suite's ``TRITON_INTERPRET`` lifted while the module runs
    (Triton reads it when a kernel is decorated); else they run as the suite runs them.  Compiled
    kernels that call ``triton.language``'s own jit functions (``tl.cdiv``, ``tl.max``, ...) fail to
    compile in this process, which imported Triton interpreted: :func:`run_compiled` runs them.
    ``register``: in ``sys.modules`` under its name (a script's dataclasses look themselves up)."""
    spec = importlib.util.spec_from_file_location(name or Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[spec.name] = module
    saved = os.environ.pop("TRITON_INTERPRET", None) if compiled else None
    try:
        spec.loader.exec_module(module)
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved
    return module


def load_source(source: str, directory: Path, name: str, *, compiled: bool = True):
    """``source`` written to ``directory/<name>.py`` and loaded as :func:`load_module` loads it."""
    path = Path(directory) / f"{name}.py"
    path.write_text(source)
    return load_module(path, name, compiled=compiled)


def run_compiled(script: str, timeout: float = 300) -> str:
    """``script`` run by a Python of its own, Triton imported compiled (no ``TRITON_INTERPRET``: the
    suite imports it interpreted, and then ``triton.language``'s own jit functions are interpreted
    ones that a GPU kernel cannot call), from the repository's root; fails the test with its output
    unless it exits 0.  Returns its output."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", script], cwd=_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return output

"""A Python file loaded as a module, its Triton kernels compiled for the GPU where asked."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path


def load_module(path: Path, name: str | None = None, *, compiled: bool = True, register: bool = False):
    """The module in ``path`` (Triton reads a kernel's source from its file).  ``compiled``: its
    kernels are made for the GPU, the suite's ``TRITON_INTERPRET`` lifted while the module runs
    (Triton reads it when a kernel is decorated); else they run as the suite runs them.
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

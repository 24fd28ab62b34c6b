"""Checks on a candidate's source made before any of it runs."""
from __future__ import annotations

import ast

# A torch.compile seed of a whole network is large (KernelBench level 3's DenseNet201: 1.5 MB of
# generated kernels); far beyond that a source is more likely a payload than a kernel.
MAX_SOURCE_BYTES = 4_000_000
# Work outside the timed stream or process, or outside Triton altogether.
FORBIDDEN_MODULES = ("threading", "_thread", "multiprocessing", "concurrent", "subprocess", "socket",
                     "asyncio", "ctypes", "cffi", "signal")
FORBIDDEN_CUDA = ("Stream", "stream", "set_stream", "ExternalStream", "CUDAGraph", "graph", "graphs")
FORBIDDEN_OS = ("fork", "forkpty", "system", "popen", "kill", "killpg", "execv", "execve", "execvp",
                "spawnv", "spawnl", "posix_spawn")


def static_rejection(source: str) -> str | None:
    """Why this source is rejected before running it, or None if it may run.

    A syntax error is not a rejection: it is reported as a compile error when
    the module is loaded, with its traceback.
    """
    if len(source.encode("utf-8", "replace")) > MAX_SOURCE_BYTES:
        return f"source larger than {MAX_SOURCE_BYTES} bytes"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return "the candidate does not define class ModelNew"
    if not _has_triton_kernel(tree):
        return "the candidate defines no @triton.jit kernel: a candidate must launch its own Triton kernel"
    return _forbidden_use(tree)


def _forbidden_use(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            if name.split(".")[0] in FORBIDDEN_MODULES:
                return f"the candidate imports {name}: kernels run on the calling thread and stream only"
        if isinstance(node, ast.Attribute):
            chain = _decorator_name(node)
            parts = chain.split(".")
            if "cuda" in parts[:-1] and node.attr in FORBIDDEN_CUDA:
                return f"the candidate uses {chain}: work on other CUDA streams or graphs escapes the timing"
            if parts[0] == "os" and len(parts) == 2 and node.attr in FORBIDDEN_OS:
                return f"the candidate uses {chain}"
    return None


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _has_triton_kernel(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if _decorator_name(dec).split(".")[-1] in ("jit", "autotune", "heuristics"):
                    return True
    return False

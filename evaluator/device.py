"""Which device evaluations run on, decided without initialising CUDA here."""
from __future__ import annotations

import subprocess
import sys

_PROBE = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"


def cuda_device_count() -> int:
    """GPUs that torch sees, asked in a throw-away process (the engine stays CUDA-free)."""
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
        return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else 0
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError):
        return 0


def resolve_device(requested: str) -> tuple[str, int]:
    """``(device, gpu_count)`` for ``auto``, ``cpu`` or ``cuda``."""
    if requested == "cpu":
        return "cpu", 0
    count = cuda_device_count()
    if requested == "cuda" and count == 0:
        raise RuntimeError("evaluator.device=cuda, but torch sees no CUDA GPU here")
    return ("cuda", count) if count else ("cpu", 0)

"""Which device evaluations run on, decided without initialising CUDA here."""
from __future__ import annotations

import functools
import json
import subprocess
import sys

# Names and torch's version come with the count: what a run's stored reference checks were made on
# (evo.loop.check_store).  A name that cannot be read (a GPU taken exclusively) leaves it empty.
_PROBE = ("import json, torch\n"
          "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
          "try:\n    names = [torch.cuda.get_device_name(i) for i in range(n)]\n"
          "except Exception:\n    names = []\n"
          "print(json.dumps({'count': n, 'names': names, 'torch': torch.__version__}))")


@functools.lru_cache(maxsize=1)
def _host_gpus() -> dict:
    """This host's GPUs as torch sees them, asked once, in a throw-away process (the engine stays
    CUDA-free)."""
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
        if out.returncode == 0:
            return json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError):
        pass
    return {"count": 0, "names": [], "torch": ""}


def cuda_device_count() -> int:
    """GPUs that torch sees on this host."""
    return int(_host_gpus().get("count", 0))


def gpu_environment() -> str:
    """This host's GPU models and torch's version (``"NVIDIA H100 80GB HBM3 x2; torch 2.11.0"``), or
    "" where there is no GPU or a name could not be read."""
    gpus = _host_gpus()
    names = gpus.get("names") or []
    if not names or len(names) != gpus.get("count"):
        return ""
    models = ", ".join(f"{name} x{names.count(name)}" for name in sorted(set(names)))
    return f"{models}; torch {gpus.get('torch', '')}"


def resolve_device(requested: str) -> tuple[str, int]:
    """``(device, gpu_count)`` for ``auto``, ``cpu`` or ``cuda``."""
    if requested == "cpu":
        return "cpu", 0
    count = cuda_device_count()
    if requested == "cuda" and count == 0:
        raise RuntimeError("evaluator.device=cuda, but torch sees no CUDA GPU here")
    return ("cuda", count) if count else ("cpu", 0)

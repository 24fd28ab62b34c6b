"""The GPU-busy share of the experiments: ``nvidia-smi``'s utilisation.gpu (and memory used) sampled in a thread."""
from __future__ import annotations

import statistics
import subprocess
import threading
import time


class UtilisationSampler:
    """``nvidia-smi``'s utilisation.gpu every 100 ms in a thread, each sample with the time it was
    read (and the GPU memory used then, for :meth:`peak_memory_mb`); none where ``enabled`` is false
    or there is no ``nvidia-smi`` (the figures say n/a)."""

    def __init__(self, index: int = 0, enabled: bool = True):
        self.samples: list[tuple[float, float]] = []
        self.memory_mb: list[tuple[float, float]] = []
        self.proc = None
        if not enabled:
            return
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "-i", str(index), "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                 "-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                busy, used = (float(x) for x in line.split(","))
            except ValueError:
                continue
            now = time.time()
            self.samples.append((now, busy))
            self.memory_mb.append((now, used))

    def stop(self) -> float | None:
        """Stop sampling: the mean share of every sample taken (None without samples)."""
        if self.proc is None:
            return None
        self.proc.terminate()
        self.proc.wait()
        return self.busy()

    def busy(self, start: float = float("-inf"), end: float = float("inf")) -> float | None:
        """The mean share of the samples read between ``start`` and ``end`` (``time.time()``)."""
        inside = [value for t, value in self.samples if start <= t <= end]
        return statistics.mean(inside) / 100 if inside else None

    def peak_memory_mb(self, start: float = float("-inf"), end: float = float("inf")) -> float | None:
        """The most GPU memory used (all processes, MiB) in the samples read between ``start`` and ``end``."""
        inside = [used for t, used in self.memory_mb if start <= t <= end]
        return max(inside) if inside else None

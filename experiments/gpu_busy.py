"""The GPU-busy share of the experiments: ``nvidia-smi``'s utilisation.gpu sampled in a thread."""
from __future__ import annotations

import statistics
import subprocess
import threading
import time


class UtilisationSampler:
    """``nvidia-smi``'s utilisation.gpu every 100 ms in a thread, each sample with the time it was
    read; none where ``enabled`` is false or there is no ``nvidia-smi`` (the figures say n/a)."""

    def __init__(self, index: int = 0, enabled: bool = True):
        self.samples: list[tuple[float, float]] = []
        self.proc = None
        if not enabled:
            return
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "-i", str(index), "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                 "-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.samples.append((time.time(), float(line.strip())))
            except ValueError:
                pass

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

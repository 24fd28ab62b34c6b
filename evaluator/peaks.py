"""The GPU's roofline peaks an evaluator hands to its evaluations: configured, or measured once on
this GPU by a request of their own (never read from anything a candidate could write)."""
from __future__ import annotations

import threading
from typing import Callable

from evaluator.sandbox import SandboxWorker


class RooflinePeaks:
    def __init__(self, configured: Callable[[], dict | None], device: str, measure: Callable[[SandboxWorker], dict]):
        """``configured()``: the settings' peaks, if any (read when asked: settings travel per request);
        ``measure(worker)``: the ``roofline_peaks`` request's reply."""
        self.configured, self.device, self._measure = configured, device, measure
        self._peaks: dict | None = None  # this GPU's, once measured ({}: given up on)
        self._lock = threading.Lock()
        self._failures = 0  # out of memory beside other evaluations, say: tried again, three times

    def get(self, worker: SandboxWorker) -> dict | None:
        """Configured peaks, else this GPU's, measured on ``worker`` the first time they are asked."""
        configured = self.configured()
        if configured or self.device != "cuda":
            return configured
        with self._lock:
            if self._peaks is None:
                reply = self._measure(worker)
                self._failures += "bytes_per_s" not in reply
                if "bytes_per_s" in reply or self._failures >= 3:  # else tried again next time
                    self._peaks = reply if "bytes_per_s" in reply else {}  # {}: no roofline fraction
            return self._peaks or None

"""The GPU's roofline peaks an evaluator hands to its evaluations: configured, or measured once on
this GPU by a request of their own (never read from anything a candidate could write)."""
from __future__ import annotations

import threading
from typing import Callable

from evaluator.replies import MeasuredPeaks
from evaluator.sandbox import SandboxWorker


class RooflinePeaks:
    def __init__(self, configured: Callable[[], dict | None], device: str, measure: Callable[[SandboxWorker], MeasuredPeaks]):
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
                peaks = self._measure(worker).peaks
                self._failures += peaks is None
                if peaks is not None or self._failures >= 3:  # else tried again next time
                    self._peaks = peaks or {}  # {}: no roofline fraction
            return self._peaks or None

"""How fast a GPU's clocks rise after idling and fall after work: what the timing's warm-up must cover.

    python3 experiments/clock_probe.py --out $OUT/clocks.json

Two experiments on GPU 0, each with a compute-bound kernel (an fp32 matmul, the most clock-sensitive)
and a memory-bound one (a 1 GiB copy), each call timed with CUDA events:

* ramp: after ``--idle`` seconds idle, the calls back to back for ``--ramp-s`` seconds; per call its
  time, its start since the work began, and the SM clock NVML reports just before it.
* gaps: busy for 0.5 s, then idle for a gap (0.02 to 2 s), then 20 calls: the first calls' times
  over the steady ones', and the clock NVML reports before the first.  This is what an evaluation
  timed right after another (the pipeline's case) or after a pause sees.

The timing's ``warmup_s`` (0.2 s by default) covers a ramp from idle; the question is whether a
GPU busy a moment before needs it.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from pathlib import Path

import torch


class Nvml:
    """The SM clock through libnvidia-ml (no Python binding needed); ``None`` where it is missing."""

    def __init__(self, device: int):
        self.lib, self.handle = None, ctypes.c_void_p()
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return
            bus = torch.cuda.get_device_properties(device)
            pci = f"{bus.pci_domain_id:08x}:{bus.pci_bus_id:02x}:{bus.pci_device_id:02x}.0".encode()
            if lib.nvmlDeviceGetHandleByPciBusId_v2(pci, ctypes.byref(self.handle)) != 0:
                return
            self.lib = lib
        except (OSError, AttributeError):
            self.lib = None

    def sm_mhz(self) -> int | None:
        if self.lib is None:
            return None
        value = ctypes.c_uint()
        return value.value if self.lib.nvmlDeviceGetClockInfo(self.handle, 1, ctypes.byref(value)) == 0 else None

    def max_sm_mhz(self) -> int | None:
        if self.lib is None:
            return None
        value = ctypes.c_uint()
        return value.value if self.lib.nvmlDeviceGetMaxClockInfo(self.handle, 1, ctypes.byref(value)) == 0 else None


def timed(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def busy(fn, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        fn()
        torch.cuda.synchronize()


def ramp(fn, nvml: Nvml, idle_s: float, ramp_s: float) -> list[dict]:
    time.sleep(idle_s)
    began, rows = time.monotonic(), []
    while time.monotonic() - began < ramp_s:
        mhz = nvml.sm_mhz()
        rows.append({"t_ms": round(1e3 * (time.monotonic() - began), 2), "mhz": mhz, "ms": round(timed(fn), 4)})
    return rows


def gaps(fn, nvml: Nvml, gap_s: list[float], repeats: int) -> list[dict]:
    rows = []
    for gap in gap_s:
        for _ in range(repeats):
            busy(fn, 0.5)
            time.sleep(gap)
            mhz = nvml.sm_mhz()
            times = [timed(fn) for _ in range(20)]
            steady = statistics.median(times[10:])
            rows.append({"gap_s": gap, "mhz_before": mhz, "first_over_steady": round(times[0] / steady, 4),
                         "first3_over_steady": round(statistics.mean(times[:3]) / steady, 4),
                         "steady_ms": round(steady, 4)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=3.0)
    parser.add_argument("--ramp-s", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    nvml = Nvml(0)
    a = torch.randn(4096, 4096, device="cuda")
    src, dst = torch.empty(1 << 28, device="cuda"), torch.empty(1 << 28, device="cuda")
    kernels = {"matmul_fp32_4096": lambda: a @ a, "copy_1GiB": lambda: dst.copy_(src)}
    for fn in kernels.values():
        busy(fn, 0.2)  # loaded and compiled once before anything is measured
    record = {"device": torch.cuda.get_device_name(0), "max_sm_mhz": nvml.max_sm_mhz(), "kernels": {}}
    for name, fn in kernels.items():
        record["kernels"][name] = {"ramp": ramp(fn, nvml, args.idle, args.ramp_s),
                                   "gaps": gaps(fn, nvml, [0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0], args.repeats)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1))
    for name, runs in record["kernels"].items():
        steady = statistics.median(r["ms"] for r in runs["ramp"][len(runs["ramp"]) // 2:])
        slow = [r for r in runs["ramp"] if r["ms"] > 1.02 * steady]
        print(f"{name}: steady {steady:.3f} ms; from idle, calls over 2% slower until "
              f"{max((r['t_ms'] for r in slow), default=0):.0f} ms; first clocks "
              f"{[r['mhz'] for r in runs['ramp'][:5]]} MHz (max {record['max_sm_mhz']})")
        for gap in sorted({r["gap_s"] for r in runs["gaps"]}):
            mine = [r for r in runs["gaps"] if r["gap_s"] == gap]
            print(f"  idle {gap:.2f} s: first call / steady {[r['first_over_steady'] for r in mine]}, "
                  f"first 3 {[r['first3_over_steady'] for r in mine]}, clock before {[r['mhz_before'] for r in mine]}")


if __name__ == "__main__":
    main()

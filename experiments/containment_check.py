"""Containment on this machine (issue 15, deliverable 4): what a hostile candidate reached, as JSON.

    python experiments/containment_check.py [--device auto|cpu|cuda]   # writes $OUT (or .)/containment_<device>.json

For each containment mode (``auto``, ``landlock``): the line ``evo run``/``evo eval`` print, and the
verdict, wall time and findings of the candidates of ``tests/test_containment.py``: one reading
every environment it can list in /proc (a process started with a planted API key among them), one
writing into the current directory, the repository, $HOME and /tmp, one signalling a process of the
machine, one double-forking sleepers into a new session, and an honest one (with its speedup).
Expected: nothing found, nothing written but the scratch, the signalled process alive, the detached
evaluation as fast as the honest one and no sleeper left; where a protection is off, the line says why.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from evaluator import Evaluator, EvaluatorSettings, resolve_device
from evaluator.containment import describe, probe
from tests.support.hostile import DETACH, READ_ENVIRONS, REPO, SECRET, WRITE_FILES, marked
from tests.support.candidates import TASK, candidate


def _report(evaluator: Evaluator, name: str):
    path = evaluator.worker.scratch / name
    return json.loads(path.read_text()) if path.exists() else None


def check_mode(device: str, mode: str) -> dict:
    settings = EvaluatorSettings(device=device, timeout_s=120, containment=mode, compile_baseline=False)
    evaluator = Evaluator(settings, device, 0 if device == "cuda" else None)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              env=dict(os.environ, OPENAI_API_KEY=SECRET))
    name, marker = f"escaped-{uuid.uuid4().hex[:8]}", f"evo-escapee-{uuid.uuid4().hex[:12]}"
    targets = list(dict.fromkeys([os.getcwd(), str(REPO), os.path.expanduser("~"), "/tmp"]))
    kill = f'_os = __import__("o" + "s")\ntry:\n    getattr(_os, "ki" + "ll")({holder.pid}, 9)\nexcept OSError:\n    pass\n'
    hostile = {
        "honest": candidate(),
        "read_environs": READ_ENVIRONS.replace("SECRET", SECRET).replace("ENGINE", str(holder.pid)) + candidate(),
        "write_outside": WRITE_FILES.replace("TARGETS", repr(targets)).replace("NAME", name) + candidate(),
        "detach_sleepers": DETACH.replace("MARKER", marker) + candidate(),
    }
    rows = {}
    try:
        evaluator.evaluate("double", TASK, candidate())  # warm: worker start-up and first compile
        for label, source in hostile.items():
            started = time.monotonic()
            result = evaluator.evaluate("double", TASK, source)
            rows[label] = {"status": result.status.value, "reason": result.reason[:300],
                           "wall_s": round(time.monotonic() - started, 2), "speedup": result.speedup,
                           "containment": result.extra.get("containment")}
        rows["read_environs"]["report"] = _report(evaluator, "report-environ.json")
        rows["write_outside"]["report"] = _report(evaluator, "report-write.json")
        escaped = [str(Path(t, name)) for t in targets if Path(t, name).exists()]
        for path in escaped:
            Path(path).unlink()
        rows["write_outside"]["escaped"] = escaped
        time.sleep(0.5)
        rows["detach_sleepers"]["left_running"] = marked(marker)
        result = evaluator.evaluate("double", TASK, kill + candidate())
        rows["signal_other_process"] = {"status": result.status.value, "target_alive": holder.poll() is None}
    finally:
        holder.kill()
        holder.wait()
        evaluator.close()
    state = probe(network=settings.isolate_network, mode=mode, cuda=device == "cuda")
    return {"line": describe(state), "probe": state, "candidates": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    device, _ = resolve_device(args.device)
    record = {"device": device, "modes": {mode: check_mode(device, mode) for mode in ("auto", "landlock")}}
    out = Path(args.out) / f"containment_{device}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    for mode, row in record["modes"].items():
        print(f"{mode}: {row['line']}")
        for label, found in row["candidates"].items():
            shown = {k: v for k, v in found.items() if k not in ("reason", "containment")}
            print(f"  {label}: {json.dumps(shown)}")
    print(f"written: {out}")


if __name__ == "__main__":
    main()

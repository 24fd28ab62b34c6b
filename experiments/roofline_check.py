"""The roofline of a few seeds on the GPU: both floors, the bound, the fraction (issue 33, deliverable 4).

    python3 experiments/roofline_check.py level1/1_Square_matrix_multiplication_ level1/40_LayerNorm ...

Each name is ``<folder under .kbsrc>/<problem>``; its seed is ``.kbsrc/seeds/<folder>__<problem>.seed.py``
(as ``kernelbench_seeds.py --captures`` keeps them).  Writes ``roofline_check.json`` under $OUT.
"""
import json
import os
import sys
from pathlib import Path
from evaluator import Evaluator, EvaluatorSettings
ev = Evaluator(EvaluatorSettings(device="cuda", timeout_s=300), "cuda", 0)
out = {}
try:
    for name in sys.argv[1:]:
        level, stem = name.split("/")
        task = Path(f".kbsrc/{level}/{stem}.py").read_text()
        seed = Path(f".kbsrc/seeds/{level}__{stem}.seed.py").read_text()
        r = ev.evaluate(stem, task, seed)
        out[name] = {"status": r.status.value, "runtime_ms": r.runtime_ms, "compiled_ms": r.compiled_runtime_ms,
                     "roofline_fraction": r.roofline_fraction, "roofline": r.extra.get("roofline"),
                     "work": r.extra.get("work"), "reason": r.reason[:200]}
        print(name, json.dumps(out[name]), flush=True)
finally:
    ev.close()
Path(os.environ["OUT"], "roofline_check.json").write_text(json.dumps(out, indent=1))

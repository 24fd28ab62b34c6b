"""Seeds from torch.compile on the GPU: derive one for every built-in task, evaluate it, and
compare it with the hand-written seed (and, with --search, run a short search from them).

    python3 experiments/compile_seeds_gpu.py --out $OUT [--search 24]

1. One evaluator worker (GPU 0) derives a seed from inductor's Triton for each task's reference
   (``Evaluator.compile_seed``, in the sandbox), then evaluates it and the task's own seed.
2. ``--search N``: the problem files of the tasks that gave a seed are copied without their
   seeds into a scratch directory, and ``evo run`` searches N children from the derived seeds
   (offline operators).
Writes ``compile_seeds.md`` and the derived seeds (``seeds/``) under ``--out``.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evaluator import Evaluator, EvaluatorSettings
from evo.core.task import load_tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--search", type=int, default=0, help="children of a short search from the derived seeds")
    args = parser.parse_args()
    out = Path(args.out)
    (out / "seeds").mkdir(parents=True, exist_ok=True)
    tasks = load_tasks("default")
    ev = Evaluator(EvaluatorSettings(device="cuda", timeout_s=600), "cuda", 0)
    lines = ["| task | derived seed | speedup | vs torch.compile | roofline | hand-written seed | derive s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    derived = []  # tasks whose reference gave a seed: the search runs on these
    for task in tasks:
        t0 = time.monotonic()
        reply = ev.compile_seed(task.name, task.source)
        took = time.monotonic() - t0
        own = ev.evaluate(task.name, task.source, task.seeds[0])
        own_text = f"{own.speedup:.3f}x" if own.speedup else own.status.value
        if not reply.ok:
            lines.append(f"| {task.name} | no seed: {reply.error[:90]} | - | - | - | {own_text} | {took:.1f} |")
            print(lines[-1], flush=True)
            continue
        (out / "seeds" / f"{task.name}.py").write_text(reply.source)
        derived.append(task)
        r = ev.evaluate(task.name, task.source, reply.source)
        if r.correct:
            roof = f"{r.roofline_fraction:.1%}" if r.roofline_fraction is not None else "-"
            lines.append(f"| {task.name} | correct | {r.speedup:.3f}x | {r.speedup_vs_compiled or 0:.3f}x | {roof} | "
                         f"{own_text} | {took:.1f} |")
        else:
            lines.append(f"| {task.name} | {r.status.value}: {r.reason[:90]} | - | - | - | {own_text} | {took:.1f} |")
        print(lines[-1], flush=True)
    ev.close()
    text = "\n".join(lines) + "\n"
    if args.search:
        text += "\n" + search(derived, args.search, out)
    (out / "compile_seeds.md").write_text(text)
    print(text)


def search(tasks, children: int, out: Path) -> str:
    """``evo run`` on copies of the problem files that ship no seed: the seeds come from torch.compile."""
    problems = Path(tempfile.mkdtemp(prefix="seedless-"))
    for task in tasks:
        shutil.copy(task.path, problems / Path(task.path).name)
    cmd = [sys.executable, "-m", "evo.cli", "run", f"run.dir={out / 'run'}", f"task.path={problems}",
           f"run.budget.evaluations={children}", "islands.count=2", "run.progress=false",
           "evaluator.compile_baseline=false"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    log = done.stdout + done.stderr
    (out / "search.log").write_text(log)
    return f"`{' '.join(cmd[1:])}`: exit {done.returncode}\n\n```\n{log[-4000:]}\n```\n"


if __name__ == "__main__":
    main()

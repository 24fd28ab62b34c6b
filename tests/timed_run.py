"""A run built directly with ``Archive``: a CVT archive whose kernels were timed on every shape set.

As ``evaluator.time_shapes=all`` records them: each correct evaluation carries
``extra["shape_timings"]``, one entry per shape set of the task.  The sources
are the built-in seeds with other block sizes (all correct), the speedups are
made up so that each row_sum shape bucket has its own winner.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from omegaconf import OmegaConf

from archive import Archive
from evaluator.result import EvalResult, Status
from evo.core.descriptors import by_names
from evo.core.task import load_tasks

CVT_CELLS = 16
DEVICE = "cpu (Triton interpreter)"
# Per task: (BLOCK_SIZE of the seed, speedup on each shape set of SHAPES, small to large).
SPEEDUPS = {
    "row_sum": [(64, [2.0, 1.8, 0.9, 0.5]),  # fastest on the two smallest shape sets
                (256, [1.0, 1.2, 1.5, 1.1]),  # on the third
                (1024, [0.5, 0.7, 1.0, 1.6])],  # on the largest, and anything larger
    "gelu": [(1024, [1.1, 1.0, 0.9, 1.2])],  # one kernel serves every bucket
}
# An incorrect row_sum program with timings that would win everything: never exported.
INCORRECT_SPEEDUPS = [9.0, 9.0, 9.0, 9.0]


def _timings(task, speedups: list[float]) -> list[dict]:
    """``extra["shape_timings"]`` as the evaluator reports it: the task's shape sets with these speedups."""
    import torch

    problem: dict = {}
    exec(compile(task.source, task.path, "exec"), problem)
    out = []
    for shape, s in zip(problem["SHAPES"], speedups):
        with torch.device("meta"):
            numel = sum(t.numel() for t in problem["get_inputs"](**shape))
        out.append(dict(shape=shape, numel=numel, speedup=s, speedup_noise=0.01, runtime_ms=1.0 / s,
                        ref_runtime_ms=1.0))
    return out


def with_block_size(source: str, block: int) -> str:
    return re.sub(r"^BLOCK_SIZE = \d+", f"BLOCK_SIZE = {block}", source, count=1, flags=re.M)


def build_timed_run(run_dir: Path, template_run: Path) -> dict[str, list[int]]:
    """Write the run into ``run_dir`` (run.json and config.yaml from ``template_run``, a CVT archive);
    returns per task the program ids in the order of ``SPEEDUPS``."""
    run_dir.mkdir(parents=True)
    shutil.copyfile(template_run / "run.json", run_dir / "run.json")
    config = OmegaConf.load(template_run / "config.yaml")
    config.archive.cvt_cells = CVT_CELLS
    OmegaConf.save(config, run_dir / "config.yaml")
    tasks = {t.name: t for t in load_tasks("default")}
    archive = Archive(f"sqlite:///{run_dir / 'archive.db'}", cvt_cells=CVT_CELLS,
                      descriptors=by_names(config.archive.descriptors, continuous=True))
    ids: dict[str, list[int]] = {}
    for name, kernels in SPEEDUPS.items():
        task = tasks[name]
        for block, speedups in kernels:
            program = archive.add_program(task=name, island=0, generation=0, operator="seed",
                                          source=with_block_size(task.seeds[0], block))
            archive.record_evaluation(program, EvalResult(
                status=Status.CORRECT, speedup=speedups[-1], speedup_noise=0.01, runtime_ms=1.0 / speedups[-1],
                ref_runtime_ms=1.0, device=DEVICE, extra={"shape_timings": _timings(task, speedups)}))
            ids.setdefault(name, []).append(program.id)
    wrong = archive.add_program(task="row_sum", island=0, generation=1, operator="constants",
                                source=with_block_size(tasks["row_sum"].seeds[0], 32))
    archive.record_evaluation(wrong, EvalResult(status=Status.INCORRECT, speedup=None, device=DEVICE, extra={
        "shape_timings": _timings(tasks["row_sum"], INCORRECT_SPEEDUPS)}))
    archive.close()
    return ids

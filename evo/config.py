"""The one place where Hydra config becomes typed objects.

Nothing past :func:`build` sees a ``DictConfig``: the run loop, islands,
operators and evaluator take plain constructor arguments.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from omegaconf import DictConfig, OmegaConf

from evaluator import EvaluatorSettings
from evaluator.choices import check_choices
from evo.core.descriptors import Continuous, Descriptor, by_names
from evo.core.errors import ConfigError
from evo.core.hydra_nodes import instantiate_node
from evo.core.inspiration import Inspiration
from evo.core.novelty import NoveltySettings
from evo.core.selection import Selection
from evo.core.task import Task
from evo.loop.run_settings import RunSettings
from islands.migration import MigrationSettings
from islands.ray_backend import RaySettings
from operators.base import Operator
from operators.embeddings import Embeddings
from operators.llm_client import LLMClient
from operators.steering import LLMSteering


@dataclass
class Components:
    tasks: list[Task]
    run: RunSettings
    evaluator: EvaluatorSettings
    island_count: int
    migration: MigrationSettings
    operators: list[Operator]
    weights: list[float]
    llm: LLMClient | None
    steering: LLMSteering | None
    ray: RaySettings
    backend: Literal["ray", "local"]  # run.backend; local: threads in this process, for debugging
    archive_url: str
    descriptors: tuple[Descriptor | Continuous, ...]  # Continuous ones for a CVT archive
    selection: Selection
    inspiration: Inspiration
    cvt_cells: int  # 0: a grid archive
    progress: bool
    compile_seeds: bool  # tasks without a seed kernel start from torch.compile's Triton (GPU)
    search_while_preparing: bool  # GPU, pipelined: the search starts with the first task prepared
    keep_stored_sources: bool  # a resume whose problem files changed searches on with the stored ones
    seeds_from: str | None  # run.seeds_from: another run whose seeds and checks this one takes (evo.loop.borrow)
    novelty: NoveltySettings
    embeddings: Embeddings | None  # novelty.embedding_model's, with an LLM

    def __post_init__(self):
        check_choices(self, "run", ConfigError)  # its choices are run keys: run.backend


def _operators(cfg: DictConfig, llm: LLMClient | None) -> tuple[list[Operator], list[float]]:
    operators, weights = [], []
    for name, entry in cfg.operators.items():
        built = instantiate_node(entry.operator, f"operators.{name}")
        if isinstance(built, functools.partial):
            if not getattr(built.func, "needs_llm", False):
                raise ConfigError(f"operators.{name} is partial but is not an LLM operator")
            if llm is None:
                continue  # LLM operators are enabled by setting llm.model
            try:
                built = built(client=llm)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"invalid operators.{name} config: {exc}") from None
        if not isinstance(built, Operator):
            raise ConfigError(f"operators.{name} builds {type(built).__name__}, not an Operator")
        if built.repairs or built.seeds or built.sweeps:  # scheduled by the run loop, never drawn by weight
            if float(entry.weight) != 0:
                raise ConfigError(f"operators.{name} repairs failed children: set its probability, not a weight"
                                  if built.repairs else f"operators.{name} sweeps new elites: set its max_children, "
                                  "not a weight" if built.sweeps else f"operators.{name} writes the seeds the run "
                                  "loop asks for (run.llm_seeds): set its weight to 0")
            if built.seeds or (built.sweeps and built.max_children > 0) or (built.repairs and built.probability > 0):
                operators.append(built)
                weights.append(0.0)
        elif float(entry.weight) > 0:
            operators.append(built)
            weights.append(float(entry.weight))
    if not any(weights):
        raise ConfigError("no operator is enabled: give one a positive weight, or set llm.model")
    return operators, weights


def _steering(cfg: DictConfig, llm: LLMClient | None, operators: list[Operator],
              weights: list[float]) -> LLMSteering | None:
    meta = cfg.llm.meta_prompt
    evolve_prompts = bool(meta.enabled)
    if llm is None:
        if evolve_prompts:
            raise ConfigError("llm.meta_prompt.enabled evolves LLM prompts: it needs llm.model")
        return None
    budget = instantiate_node(cfg.llm.budget, "llm.budget")
    repair = next((op.probability for op in operators if op.repairs), 0.0)
    offline = any(w > 0 and not op.needs_llm for op, w in zip(operators, weights))
    prompts = None
    if evolve_prompts:
        prompts = instantiate_node(OmegaConf.masked_copy(meta, [k for k in meta if k != "enabled"]),
                                   "llm.meta_prompt")
    return LLMSteering(models=llm.models, budget=budget, repair_probability=repair, offline_operators=offline,
                       prompts=prompts)


def build(cfg: DictConfig) -> Components:
    run_dir = str(cfg.run.dir)
    if int(cfg.islands.count) < 1:
        raise ConfigError("islands.count must be at least 1")
    # Every key is in cfg: conf/ gives it, and a resumed run's saved config lacks none (evo.resume).
    prepared = cfg.run.prepared_per_island
    try:
        run = RunSettings(
            dir=run_dir, seed=int(cfg.run.seed), budget_evaluations=int(cfg.run.budget.evaluations),
            budget_per_task=cfg.run.budget.per_task,  # as given: RunSettings refuses 0, 2.5 or "20"
            proposals_per_island=int(cfg.run.proposals_per_island), inspirations=int(cfg.run.inspirations),
            prepared_per_island=None if prepared is None else int(prepared),
            max_failed_proposals=int(cfg.run.max_failed_proposals), stats_interval=int(cfg.run.stats_interval),
            llm_seeds=int(cfg.run.llm_seeds), llm_seed_attempts=int(cfg.run.llm_seed_attempts),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    evaluator = instantiate_node(cfg.evaluator, "evaluator")  # before the operators that take its tolerance
    client = OmegaConf.masked_copy(cfg.llm, [k for k in cfg.llm if k not in ("budget", "meta_prompt")])
    llm = instantiate_node(client, "llm") if cfg.llm.model else None
    operators, weights = _operators(cfg, llm)
    run = dataclasses.replace(run, sweep_children=next((op.max_children for op in operators if op.sweeps), 0))
    url = cfg.archive.url or f"sqlite:///{Path(run_dir).resolve() / 'archive.db'}"
    cvt_cells = int(cfg.archive.cvt_cells)
    if cvt_cells < 0:
        raise ConfigError("archive.cvt_cells must be >= 0 (0: a grid)")
    novelty = instantiate_node(cfg.novelty, "novelty")
    embeddings = Embeddings(model=novelty.embedding_model, client=llm) if novelty.embedding_model and llm else None
    return Components(
        tasks=instantiate_node(cfg.task, "task"), run=run, evaluator=evaluator,
        island_count=int(cfg.islands.count), migration=instantiate_node(cfg.islands.migration, "islands.migration"),
        operators=operators, weights=weights, llm=llm, steering=_steering(cfg, llm, operators, weights),
        ray=instantiate_node(cfg.ray, "ray"), backend=str(cfg.run.backend), archive_url=url,
        descriptors=by_names(cfg.archive.descriptors, continuous=cvt_cells > 0),
        selection=instantiate_node(cfg.selection, "selection"),
        inspiration=instantiate_node(cfg.inspiration, "inspiration"), cvt_cells=cvt_cells,
        progress=bool(cfg.run.progress), compile_seeds=bool(cfg.run.compile_seeds),
        search_while_preparing=bool(cfg.run.search_while_preparing),
        keep_stored_sources=bool(cfg.run.keep_stored_sources),
        seeds_from=str(cfg.run.seeds_from) if cfg.run.get("seeds_from") else None, novelty=novelty, embeddings=embeddings,
    )


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)

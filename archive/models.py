"""SQLAlchemy tables of the archive: programs, lineage, evaluations, cells.

Every column holds one fact; nothing is stuffed into JSON text.  The schema
version is kept in ``meta`` so an older engine refuses a newer database.
"""
from __future__ import annotations

import time

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SCHEMA_VERSION = 11  # the number of the head revision in archive/migrations/versions


class Base(DeclarativeBase):
    pass


class MetaRow(Base):
    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class ProgramRow(Base):
    __tablename__ = "programs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task: Mapped[str] = mapped_column(String(128))  # indexed through ix_programs_task_hash's prefix
    island: Mapped[int] = mapped_column(Integer)
    generation: Mapped[int] = mapped_column(Integer)
    operator: Mapped[str] = mapped_column(String(64), index=True)
    source: Mapped[str] = mapped_column(Text)
    source_hash: Mapped[str] = mapped_column(String(64))
    cell_key: Mapped[str | None] = mapped_column(String(256), nullable=True)  # its MAP-Elites cell
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
    __table_args__ = (Index("ix_programs_task_hash", "task", "source_hash"),)


class LineageRow(Base):
    """A child's parents (role ``parent``) and the elites shown to it (``inspiration``)."""

    __tablename__ = "lineage"
    child_id: Mapped[int] = mapped_column(ForeignKey("programs.id"), primary_key=True)
    parent_id: Mapped[int] = mapped_column(ForeignKey("programs.id"), primary_key=True, index=True)
    role: Mapped[str] = mapped_column(String(16), primary_key=True)


class EvaluationRow(Base):
    __tablename__ = "evaluations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    program_id: Mapped[int] = mapped_column(ForeignKey("programs.id"), index=True)
    status: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    runtime_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    ref_runtime_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    runtime_spread: Mapped[float | None] = mapped_column(Float, nullable=True)
    ref_runtime_spread: Mapped[float | None] = mapped_column(Float, nullable=True)
    speedup_noise: Mapped[float | None] = mapped_column(Float, nullable=True)
    compiled_runtime_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    speedup_vs_compiled: Mapped[float | None] = mapped_column(Float, nullable=True)
    roofline_fraction: Mapped[float | None] = mapped_column(Float, nullable=True)
    timing_representative: Mapped[bool] = mapped_column(Boolean, default=False)
    device: Mapped[str] = mapped_column(String(128), default="")
    shapes_checked: Mapped[int] = mapped_column(Integer, default=0)
    registers: Mapped[int | None] = mapped_column(Integer, nullable=True)
    spills: Mapped[int | None] = mapped_column(Integer, nullable=True)
    shared_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    num_warps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    num_stages: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str] = mapped_column(Text, default="")
    wall_s: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
    environment_id: Mapped[int | None] = mapped_column(ForeignKey("environments.id"), nullable=True)
    gpu_peak_mb: Mapped[float | None] = mapped_column(Float, nullable=True)  # the evaluation's, allocated
    reference_peak_mb: Mapped[float | None] = mapped_column(Float, nullable=True)  # the reference's alone
    # JSON, seconds per phase: host (start, transfer), load, checks, timing, timed_calls (schema 6)
    phases: Mapped[str | None] = mapped_column(Text, nullable=True)
    # JSON, racing (schema 7): {"round": "short" | "full", "reps", "bar", "from_short"}; null when not raced
    timing_round: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Schema 8: the roofline's floor (the time no kernel can beat) and what sets it: memory | compute
    roofline_bound: Mapped[str | None] = mapped_column(String(16), nullable=True)
    floor_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Schema 9: both floors, and the kernels' profile (JSON: evaluator.kernel_profile), for LLM prompts
    memory_floor_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    compute_floor_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    kernel_profile: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Schema 11: what the timed calls were held to (JSON: evaluator.timed_checks); null where unchecked
    timed_checks: Mapped[str | None] = mapped_column(Text, nullable=True)


class EnvironmentRow(Base):
    """Where an evaluation was measured: GPU, driver, CUDA, torch, triton, Python and engine versions."""

    __tablename__ = "environments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    gpu: Mapped[str] = mapped_column(String(128))
    driver: Mapped[str] = mapped_column(String(64))
    cuda: Mapped[str] = mapped_column(String(32))
    torch: Mapped[str] = mapped_column(String(64))
    triton: Mapped[str] = mapped_column(String(64))
    python: Mapped[str] = mapped_column(String(32))
    engine: Mapped[str] = mapped_column(String(128))
    __table_args__ = (UniqueConstraint("gpu", "driver", "cuda", "torch", "triton", "python", "engine",
                                       name="uq_environments_all"),)


class SetAsideRow(Base):
    """A task the run does not search, and why: its reference failed or did not fit, it got no seed,
    or its seeds all failed (``stage``)."""

    __tablename__ = "set_aside"
    task: Mapped[str] = mapped_column(String(128), primary_key=True)
    stage: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text)
    source_hash: Mapped[str] = mapped_column(String(64))  # of the problem file it was judged on
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class CellRow(Base):
    """One MAP-Elites cell of one task on one island, holding its elite."""

    __tablename__ = "cells"
    task: Mapped[str] = mapped_column(String(128), primary_key=True)
    island: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(256), primary_key=True)
    program_id: Mapped[int] = mapped_column(ForeignKey("programs.id"))
    fitness: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float, default=time.time)


class MigrationRow(Base):
    __tablename__ = "migrations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    program_id: Mapped[int] = mapped_column(ForeignKey("programs.id"))
    task: Mapped[str] = mapped_column(String(128))
    src_island: Mapped[int] = mapped_column(Integer)
    dst_island: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16), default="copy", server_default="copy")  # copy, move, reseed
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class ShapeTimingRow(Base):
    """The speedup an evaluation measured on one of the task's shape sets (``evaluator.time_shapes=all``)."""

    __tablename__ = "shape_timings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    evaluation_id: Mapped[int] = mapped_column(ForeignKey("evaluations.id"), index=True)
    shape: Mapped[str] = mapped_column(String(512))  # the get_inputs keywords, e.g. "M=4096,N=4096"
    numel: Mapped[int] = mapped_column(BigInteger)  # elements of all input tensors
    speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    speedup_noise: Mapped[float | None] = mapped_column(Float, nullable=True)
    runtime_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    ref_runtime_ms: Mapped[float | None] = mapped_column(Float, nullable=True)


class LLMCallRow(Base):
    """One LLM request made by an operator, successful or not."""

    __tablename__ = "llm_calls"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    program_id: Mapped[int | None] = mapped_column(ForeignKey("programs.id"), nullable=True)
    task: Mapped[str] = mapped_column(String(128))
    island: Mapped[int] = mapped_column(Integer)
    operator: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(256))
    prompt: Mapped[str] = mapped_column(Text, default="")
    response: Mapped[str] = mapped_column(Text, default="")
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    latency_s: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class RejectionRow(Base):  # schema 10
    """A child not evaluated: a near-duplicate of a program of its task (``evo.core.novelty``)."""

    __tablename__ = "rejections"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task: Mapped[str] = mapped_column(String(128))
    island: Mapped[int] = mapped_column(Integer)
    operator: Mapped[str] = mapped_column(String(64))
    resembles: Mapped[int] = mapped_column(ForeignKey("programs.id"))  # the program it near-duplicates
    similarity: Mapped[float] = mapped_column(Float)
    measure: Mapped[str] = mapped_column(String(16))  # tokens | embedding
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class StatsRow(Base):
    """Quality-diversity figures of one task (island -1: all islands) at a point of the run."""

    __tablename__ = "stats_history"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task: Mapped[str] = mapped_column(String(128), index=True)
    island: Mapped[int] = mapped_column(Integer)
    children_done: Mapped[int] = mapped_column(Integer)
    cells: Mapped[int] = mapped_column(Integer)
    coverage: Mapped[float] = mapped_column(Float)
    qd_score: Mapped[float] = mapped_column(Float)
    best_speedup: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class CentroidRow(Base):
    """One coordinate of one centroid of a CVT archive: drawn once per run, read back on resume."""

    __tablename__ = "cvt_centroids"
    cell: Mapped[int] = mapped_column(Integer, primary_key=True)
    axis: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[float] = mapped_column(Float)

"""Schema 1: programs, lineage, evaluations, cells, migrations, LLM calls, statistics, meta.

A frozen copy of the tables as engines before schema 2 created them (commit
347bc00); never edit it: later changes are new revisions.

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.create_table(
        "programs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("task", sa.String(128), nullable=False),
        sa.Column("island", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("operator", sa.String(64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("cell_key", sa.String(256), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_programs_operator", "programs", ["operator"])
    op.create_index("ix_programs_task_hash", "programs", ["task", "source_hash"])
    op.create_table(
        "lineage",
        sa.Column("child_id", sa.Integer(), sa.ForeignKey("programs.id"), primary_key=True),
        sa.Column("parent_id", sa.Integer(), sa.ForeignKey("programs.id"), primary_key=True),
        sa.Column("role", sa.String(16), primary_key=True),
    )
    op.create_index("ix_lineage_parent_id", "lineage", ["parent_id"])
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("program_id", sa.Integer(), sa.ForeignKey("programs.id"), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("runtime_ms", sa.Float(), nullable=True),
        sa.Column("ref_runtime_ms", sa.Float(), nullable=True),
        sa.Column("runtime_spread", sa.Float(), nullable=True),
        sa.Column("timing_representative", sa.Boolean(), nullable=False),
        sa.Column("device", sa.String(128), nullable=False),
        sa.Column("shapes_checked", sa.Integer(), nullable=False),
        sa.Column("registers", sa.Integer(), nullable=True),
        sa.Column("spills", sa.Integer(), nullable=True),
        sa.Column("shared_bytes", sa.Integer(), nullable=True),
        sa.Column("num_warps", sa.Integer(), nullable=True),
        sa.Column("num_stages", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_evaluations_program_id", "evaluations", ["program_id"])
    op.create_table(
        "cells",
        sa.Column("task", sa.String(128), primary_key=True),
        sa.Column("island", sa.Integer(), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column("program_id", sa.Integer(), sa.ForeignKey("programs.id"), nullable=False),
        sa.Column("fitness", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "migrations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("program_id", sa.Integer(), sa.ForeignKey("programs.id"), nullable=False),
        sa.Column("task", sa.String(128), nullable=False),
        sa.Column("src_island", sa.Integer(), nullable=False),
        sa.Column("dst_island", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "llm_calls",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("program_id", sa.Integer(), sa.ForeignKey("programs.id"), nullable=True),
        sa.Column("task", sa.String(128), nullable=False),
        sa.Column("island", sa.Integer(), nullable=False),
        sa.Column("operator", sa.String(64), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("response", sa.Text(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "stats_history",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("task", sa.String(128), nullable=False),
        sa.Column("island", sa.Integer(), nullable=False),
        sa.Column("children_done", sa.Integer(), nullable=False),
        sa.Column("cells", sa.Integer(), nullable=False),
        sa.Column("coverage", sa.Float(), nullable=False),
        sa.Column("qd_score", sa.Float(), nullable=False),
        sa.Column("best_speedup", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_stats_history_task", "stats_history", ["task"])


def downgrade() -> None:
    for table in ("stats_history", "llm_calls", "migrations", "cells", "evaluations", "lineage", "programs", "meta"):
        op.drop_table(table)

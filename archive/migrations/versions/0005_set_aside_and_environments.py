"""Schema 5: tasks set aside with their reason, the environment that measured each evaluation,
and an evaluation's GPU memory peak beside its reference's.

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "set_aside",
        sa.Column("task", sa.String(128), primary_key=True),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "environments",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("gpu", sa.String(128), nullable=False),
        sa.Column("driver", sa.String(64), nullable=False),
        sa.Column("cuda", sa.String(32), nullable=False),
        sa.Column("torch", sa.String(64), nullable=False),
        sa.Column("triton", sa.String(64), nullable=False),
        sa.Column("python", sa.String(32), nullable=False),
        sa.Column("engine", sa.String(128), nullable=False),
        sa.UniqueConstraint("gpu", "driver", "cuda", "torch", "triton", "python", "engine",
                            name="uq_environments_all"),
    )
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("environment_id", sa.Integer(), sa.ForeignKey(
            "environments.id", name="fk_evaluations_environment_id"), nullable=True))
        batch.add_column(sa.Column("gpu_peak_mb", sa.Float(), nullable=True))
        batch.add_column(sa.Column("reference_peak_mb", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("reference_peak_mb")
        batch.drop_column("gpu_peak_mb")
        batch.drop_column("environment_id")
    op.drop_table("environments")
    op.drop_table("set_aside")

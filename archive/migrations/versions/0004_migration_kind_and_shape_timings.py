"""Schema 4: a migration row says what kind it was (copy, move, reseed), and an evaluation
keeps the speedup measured on each shape set it timed (``evaluator.time_shapes=all``).

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("migrations") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="copy"))
    op.create_table(
        "shape_timings",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("evaluation_id", sa.Integer(), sa.ForeignKey("evaluations.id"), nullable=False),
        sa.Column("shape", sa.String(512), nullable=False),
        sa.Column("numel", sa.BigInteger(), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("speedup_noise", sa.Float(), nullable=True),
        sa.Column("runtime_ms", sa.Float(), nullable=True),
        sa.Column("ref_runtime_ms", sa.Float(), nullable=True),
    )
    op.create_index("ix_shape_timings_evaluation_id", "shape_timings", ["evaluation_id"])


def downgrade() -> None:
    op.drop_index("ix_shape_timings_evaluation_id", "shape_timings")
    op.drop_table("shape_timings")
    with op.batch_alter_table("migrations") as batch:
        batch.drop_column("kind")

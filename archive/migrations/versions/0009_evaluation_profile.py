"""Schema 9: each evaluation's memory and compute floors (ms), and its kernels' profile as JSON (share of
device time, launches, rate against the peaks, registers, spills, occupancy), for the LLM's prompts.

Revision ID: 0009
Revises: 0008
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("memory_floor_ms", sa.Float(), nullable=True))
        batch.add_column(sa.Column("compute_floor_ms", sa.Float(), nullable=True))
        batch.add_column(sa.Column("kernel_profile", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("kernel_profile")
        batch.drop_column("compute_floor_ms")
        batch.drop_column("memory_floor_ms")

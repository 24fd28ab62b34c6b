"""Schema 8: which floor bounds each evaluation's roofline (memory or compute) and that floor, in ms.

Revision ID: 0008
Revises: 0007
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("roofline_bound", sa.String(16), nullable=True))
        batch.add_column(sa.Column("floor_ms", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("floor_ms")
        batch.drop_column("roofline_bound")

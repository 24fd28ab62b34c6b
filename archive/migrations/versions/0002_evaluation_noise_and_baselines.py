"""Schema 2: evaluations gain the reference's spread, the speedup's noise, the torch.compile
baseline and the roofline fraction (all nullable: older rows have none).

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = ("ref_runtime_spread", "speedup_noise", "compiled_runtime_ms", "speedup_vs_compiled", "roofline_fraction")


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)

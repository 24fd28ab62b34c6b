"""Schema 3: the centroids of a CVT archive, one coordinate per row.

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cvt_centroids",
        sa.Column("cell", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("axis", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("value", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cvt_centroids")

"""Schema 10: children not evaluated because they near-duplicate a program of their task.

Revision ID: 0010
Revises: 0009
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rejections",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("task", sa.String(128), nullable=False),
        sa.Column("island", sa.Integer(), nullable=False),
        sa.Column("operator", sa.String(64), nullable=False),
        sa.Column("resembles", sa.Integer(), sa.ForeignKey("programs.id"), nullable=False),
        sa.Column("similarity", sa.Float(), nullable=False),
        sa.Column("measure", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("rejections")

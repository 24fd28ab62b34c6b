"""Schema 11: what each evaluation's timed calls were held to (JSON: ``evaluator.timed_checks``): the
input sets and outputs checked, launches, whether inputs were drawn afresh and, if not, why, the
audited call's device time, so a run's results say which checks stood behind their speedups.

Revision ID: 0011
Revises: 0010
"""
import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.add_column(sa.Column("timed_checks", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("timed_checks")

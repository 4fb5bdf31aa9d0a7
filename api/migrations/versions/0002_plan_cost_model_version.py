"""plans.cost_model_version: the cost model that answered (NULL = before versioning, so stale).

The request key includes the version, so a request is solved again after the cost model changes;
the old answer stays readable under its id and is marked stale.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("cost_model_version", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("cost_model_version")

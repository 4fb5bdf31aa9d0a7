"""plans.document: the answer's JSON as sent, so a cache hit is a key lookup and these bytes.

The column holds ``"request":…,"response":…}``, the tail of the ``StoredPlan`` body exactly as the
service serialises it; the head (id, created_at, cached, cost_model_version, stale) is spliced in
front when it is sent. NULL for rows stored before this revision: the service builds it on their
first read and writes it back.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("document", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("document")

"""calibrations: residual constants fitted on a user's measured runs (``POST /v1/calibrations``).

A row per calibration, keyed by its content hash (without its ``id`` and ``created_at``): the
calibration's JSON as stored next to the columns a list shows and filters by (gpu, stack, how many
runs, in-sample and cross-validated error). Stored calibrations never change, so a plan keyed by a
request naming a ``calibration_id`` stays its answer.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "calibrations",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("gpu", sa.String(64), nullable=False),
        sa.Column("stack", sa.Text(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("in_sample_mape", sa.Float(), nullable=True),
        sa.Column("cross_validated_mape", sa.Float(), nullable=True),
        sa.Column("calibration_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_calibrations_created_at", "calibrations", ["created_at"])
    op.create_index("ix_calibrations_gpu", "calibrations", ["gpu"])


def downgrade() -> None:
    op.drop_table("calibrations")

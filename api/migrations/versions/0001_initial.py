"""The store as meshplan created it before Alembic (``Base.metadata.create_all``): plans, profiles, runs.

Databases made then have these tables and no ``alembic_version``; ``api.store.migrate`` stamps them
at this revision before upgrading.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "plans",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("gpu", sa.String(64), nullable=False),
        sa.Column("num_gpus", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("step_time_s", sa.Float(), nullable=True),
        sa.Column("tokens_per_s", sa.Float(), nullable=True),
        sa.Column("mfu", sa.Float(), nullable=True),
        sa.Column("fits", sa.Boolean(), nullable=True),
        sa.Column("request_json", sa.Text(), nullable=False),
        sa.Column("response_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_plans_created_at", "plans", ["created_at"])
    op.create_index("ix_plans_gpu", "plans", ["gpu"])
    op.create_index("ix_plans_model", "plans", ["model"])
    op.create_table(
        "profiles",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("device", sa.Text(), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("profile_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_profiles_created_at", "profiles", ["created_at"])
    op.create_index("ix_profiles_model", "profiles", ["model"])
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("measured_step_time_s", sa.Float(), nullable=False),
        sa.Column("predicted_step_time_s", sa.Float(), nullable=True),
        sa.Column("step_time_ratio", sa.Float(), nullable=True),
        sa.Column("report_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_runs_created_at", "runs", ["created_at"])


def downgrade() -> None:
    for table in ("runs", "profiles", "plans"):
        op.drop_table(table)

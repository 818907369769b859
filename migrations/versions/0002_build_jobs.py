"""Distributed build queue: one row per (fingerprint, entry) with a lease.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "build_jobs",
        sa.Column("fingerprint_id", sa.String(16), nullable=False),
        sa.Column("entry_key", sa.String(64), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("manifest_digest", sa.String(64), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('pending', 'running', 'done', 'failed')", name="ck_build_jobs_status"),
        sa.PrimaryKeyConstraint("fingerprint_id", "entry_key", name="pk_build_jobs"),
    )
    op.create_index("ix_build_jobs_status_lease_expires_at", "build_jobs", ["status", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_build_jobs_status_lease_expires_at", table_name="build_jobs")
    op.drop_table("build_jobs")

"""Build jobs record the process holding their lease (host identity and pid), so a worker on the same host
whose process is gone counts as dead at once instead of after its lease runs out.

Both columns are nullable: rows claimed by an older release, or finished, hold none, and fall back to the
lease as before.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("build_jobs") as batch:
        batch.add_column(sa.Column("holder_host", sa.String(255), nullable=True))
        batch.add_column(sa.Column("holder_pid", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("build_jobs") as batch:
        batch.drop_column("holder_pid")
        batch.drop_column("holder_host")

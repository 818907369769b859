"""Baseline: toolchain fingerprints and the manifests recorded for them.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fingerprints",
        sa.Column("id", sa.String(16), nullable=False),
        sa.Column("backend", sa.String(64), nullable=False),
        sa.Column("fields", sa.JSON(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_fingerprints"),
    )
    op.create_table(
        "manifests",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("fingerprint_id", sa.String(16), nullable=False),
        sa.Column("entry_key", sa.String(64), nullable=True),
        sa.Column("backend", sa.String(64), nullable=False),
        sa.Column("model", sa.String(255), nullable=True),
        sa.Column("component", sa.String(255), nullable=True),
        sa.Column("mode", sa.String(64), nullable=True),
        sa.Column("height", sa.Integer(), nullable=True),
        sa.Column("width", sa.Integer(), nullable=True),
        sa.Column("batch", sa.Integer(), nullable=True),
        sa.Column("dtype", sa.String(32), nullable=True),
        sa.Column("revision", sa.String(255), nullable=True),
        sa.Column("total_size", sa.BigInteger(), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("blob_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("store_url", sa.String(1024), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=True),
        sa.Column("build", sa.JSON(), nullable=False),
        sa.CheckConstraint("kind IN ('entry', 'shared')", name="ck_manifests_kind"),
        sa.ForeignKeyConstraint(["fingerprint_id"], ["fingerprints.id"],
                                name="fk_manifests_fingerprint_id_fingerprints"),
        sa.PrimaryKeyConstraint("digest", name="pk_manifests"),
        sa.UniqueConstraint("fingerprint_id", "name", name="uq_manifests_fingerprint_id_name"),
    )
    op.create_index("ix_manifests_backend_model_fingerprint_id", "manifests",
                    ["backend", "model", "fingerprint_id"])


def downgrade() -> None:
    op.drop_index("ix_manifests_backend_model_fingerprint_id", table_name="manifests")
    op.drop_table("manifests")
    op.drop_table("fingerprints")

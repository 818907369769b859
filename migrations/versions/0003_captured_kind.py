"""Captured manifests: runtime compiles a serving host wrote back (`cachekeeper capture --publish`).

Only the kind check widens; captured rows use the existing columns (no spec, no entry key).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD = "kind IN ('entry', 'shared')"
NEW = "kind IN ('entry', 'shared', 'captured')"


def _replace_kind_check(condition: str) -> None:
    # 0001 created it with the naming convention applied on top of its full name; keep that name.
    name = op.f("ck_manifests_ck_manifests_kind")
    if op.get_bind().dialect.name == "sqlite":
        # Batch mode does not reflect CHECK constraints: the copied table drops the old one by itself.
        with op.batch_alter_table("manifests", recreate="always") as batch:
            batch.create_check_constraint(name, condition)
    else:
        op.drop_constraint(name, "manifests", type_="check")
        op.create_check_constraint(name, "manifests", condition)


def upgrade() -> None:
    _replace_kind_check(NEW)


def downgrade() -> None:
    # Captured rows cannot satisfy the old check; the bucket still holds them (`catalog rebuild` restores).
    op.execute("DELETE FROM manifests WHERE kind = 'captured'")
    _replace_kind_check(OLD)

"""The catalog: an SQL index of published manifests (SQLite embedded, Postgres shared) and the
distributed build queue. See `catalog.Catalog`.

`Catalog` is imported on first use, so code that only handles rows (hydrate reading a lockfile) never
imports SQLAlchemy or Alembic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .rows import CatalogRow, Claim, FingerprintRow, JobRow, RebuildReport

if TYPE_CHECKING:
    from .catalog import Catalog

__all__ = ["Catalog", "CatalogRow", "Claim", "FingerprintRow", "JobRow", "RebuildReport"]


def __getattr__(name: str) -> object:
    if name == "Catalog":
        from .catalog import Catalog
        return Catalog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

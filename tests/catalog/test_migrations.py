"""Alembic migrations, run from code on SQLite and Postgres: up, down, up again, rows intact."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text

from cachekeeper.catalog import Catalog
from cachekeeper.catalog.db import VERSION_TABLE, head, parse_url
from cachekeeper.catalog.models import Base
from cachekeeper.errors import CatalogError, CatalogNotMigrated

from .helpers import entry

STORE = "file:///srv/store"


def test_head_is_the_captured_kind_revision() -> None:
    assert head() == "0004"


def test_upgrade_downgrade_upgrade_keeps_the_manifest_rows(catalog_url: str) -> None:
    with Catalog.connect(catalog_url) as catalog:
        assert catalog.current() is None
        catalog.upgrade("0001")
        assert catalog.current() == "0001"
        m = entry()
        catalog.record(m, store_url=STORE)       # 0001 already holds fingerprints and manifests

        catalog.upgrade("0002")
        assert catalog.current() == "0002"
        assert catalog.enqueue([("fp", "k", "{}")]) == 1

        catalog.downgrade("0001")
        assert catalog.current() == "0001"
        assert [r.digest for r in catalog.find()] == [m.digest]
        with pytest.raises(CatalogError, match="build_jobs"):
            catalog.queue_counts()

        catalog.upgrade()
        assert [r.digest for r in catalog.find()] == [m.digest]
        assert catalog.queue_counts() == {"pending": 0, "running": 0, "done": 0, "failed": 0}

        catalog.downgrade("base")
        assert catalog.current() is None


def test_the_migrated_schema_is_exactly_the_models(catalog_url: str) -> None:
    with Catalog.connect(catalog_url) as catalog:
        catalog.upgrade()
    engine = create_engine(parse_url(catalog_url))
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE, "compare_type": True})
            assert compare_metadata(ctx, Base.metadata) == []
    finally:
        engine.dispose()


def test_sqlite_migrates_itself_on_open(tmp_path: Path) -> None:
    with Catalog.open(f"sqlite:///{tmp_path}/fresh.db") as catalog:
        assert catalog.current() == head()


def test_auto_migrate_false_refuses_an_unmigrated_catalog(catalog_url: str) -> None:
    with pytest.raises(CatalogNotMigrated, match="revision none, expected 0004"):
        Catalog.open(catalog_url, auto_migrate=False)


def test_a_revision_from_a_newer_release_is_refused(catalog_url: str) -> None:
    with Catalog.connect(catalog_url) as catalog:
        catalog.upgrade()
    engine = create_engine(parse_url(catalog_url))
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(CatalogError, match="revision 0099, unknown to this cachekeeper"):
        Catalog.open(catalog_url)

"""`cachekeeper db ...` and `cachekeeper catalog rebuild`, driven through click's test runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cachekeeper.cli.db import catalog as catalog_group
from cachekeeper.cli.db import db
from cachekeeper.errors import CatalogUnreachable
from cachekeeper.format.layout import manifest_key
from cachekeeper.stores.file import FileStore
from tests.harness.postgres import free_port

from .helpers import FP, entry, publish


def test_db_upgrade_then_current(catalog_url: str) -> None:
    runner = CliRunner()
    assert "none" in runner.invoke(db, ["current", "--catalog", catalog_url], catch_exceptions=False).stdout

    up = runner.invoke(db, ["upgrade", "--catalog", catalog_url], catch_exceptions=False)
    assert up.exit_code == 0 and "0004 (head)" in up.stdout

    now = runner.invoke(db, ["current", "--catalog", catalog_url], catch_exceptions=False)
    assert now.stdout.strip() == "0004 (head)"

    down = runner.invoke(db, ["downgrade", "0001", "--catalog", catalog_url], catch_exceptions=False)
    assert down.exit_code == 0
    assert runner.invoke(db, ["current"], env={"CACHEKEEPER_CATALOG": catalog_url}).stdout.strip() == "0001"


def test_db_errors_reach_the_main_group_as_cachekeeper_errors() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/ck"
    with pytest.raises(CatalogUnreachable):
        CliRunner().invoke(db, ["current", "--catalog", url], catch_exceptions=False)


def test_catalog_rebuild_indexes_the_store_and_warns_about_bad_objects(tmp_path: Path, catalog_url: str) -> None:
    store = FileStore(tmp_path / "store")
    publish(store, entry("flux"))
    bad = manifest_key(FP.id, "0" * 32)
    store.put_bytes(bad, b"{")

    runner = CliRunner()
    runner.invoke(db, ["upgrade", "--catalog", catalog_url], catch_exceptions=False)   # Postgres needs it
    result = runner.invoke(catalog_group, ["rebuild", "--catalog", catalog_url],
                           env={"CACHEKEEPER_STORE": store.url}, catch_exceptions=False)

    assert result.exit_code == 0
    assert "1 added, 0 removed, 0 unchanged, 1 invalid" in result.stdout
    assert f"warning: {bad}:" in result.stderr

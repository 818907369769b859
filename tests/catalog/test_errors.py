"""What a misconfigured or unreachable catalog says: one line, the URL (password masked), the right class."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachekeeper.catalog import Catalog
from cachekeeper.cli.hints import hint_for
from cachekeeper.errors import CatalogError, CatalogNotMigrated, CatalogUnreachable
from tests.harness.postgres import free_port


def test_a_closed_postgres_port_is_unreachable_fast() -> None:
    url = f"postgresql://ck:s3cret@127.0.0.1:{free_port()}/catalog"
    started = time.monotonic()
    with pytest.raises(CatalogUnreachable) as info:
        Catalog.open(url)
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert "127.0.0.1" in message and "***" in message and "s3cret" not in message
    assert "\n" not in message
    assert info.value.url == url.replace("postgresql://", "postgresql+psycopg://").replace("s3cret", "***")


@pytest.mark.services
def test_postgres_without_migrations_is_not_migrated(postgres_url: str) -> None:
    with pytest.raises(CatalogNotMigrated, match="revision none") as info:
        Catalog.open(postgres_url)
    assert postgres_url.rsplit("/", 1)[1] in str(info.value)
    assert info.value.url and info.value.url.endswith(postgres_url.rsplit("/", 1)[1])
    assert hint_for(info.value) == f"run `cachekeeper db upgrade` against {info.value.url}"


@pytest.mark.services
def test_postgres_can_opt_in_to_auto_migrate(postgres_url: str) -> None:
    with Catalog.open(postgres_url, auto_migrate=True) as catalog:
        assert catalog.current() == "0004"


def test_an_unwritable_sqlite_location_is_unreachable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CatalogUnreachable, match="catalog"):
        Catalog.open(f"sqlite:///{blocker}/sub/catalog.db")


@pytest.mark.parametrize("url", ["mysql://root@localhost/ck", "not a url"])
def test_unsupported_urls_are_refused(url: str) -> None:
    with pytest.raises(CatalogError, match="catalog"):
        Catalog.open(url)


def test_the_default_catalog_lives_in_cachekeeper_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CACHEKEEPER_CATALOG", raising=False)
    monkeypatch.setenv("CACHEKEEPER_HOME", str(tmp_path / "home"))
    with Catalog.open() as catalog:
        assert catalog.url == f"sqlite:///{tmp_path}/home/catalog.db"
    assert (tmp_path / "home" / "catalog.db").is_file()


def test_the_environment_names_the_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHEKEEPER_CATALOG", f"sqlite:///{tmp_path}/env.db")
    with Catalog.open() as catalog:
        assert catalog.url.endswith("/env.db")


def test_rows_can_be_imported_without_sqlalchemy() -> None:
    code = ("import sys, cachekeeper.catalog as c; c.CatalogRow; "
            "assert not [m for m in sys.modules if m.startswith(('sqlalchemy', 'alembic'))]; "
            "c.Catalog; assert 'sqlalchemy' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)

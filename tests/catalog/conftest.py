from __future__ import annotations

from collections.abc import Iterator

import pytest

from cachekeeper.catalog import Catalog


@pytest.fixture
def catalog(catalog_url: str) -> Iterator[Catalog]:
    """A migrated catalog, on SQLite and on Postgres (see tests/harness/postgres.py)."""
    with Catalog.open(catalog_url, auto_migrate=True) as c:
        yield c

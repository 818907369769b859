"""The dashboard's /metrics on both catalogs (SQLite and a real Postgres): the build queue by status and the
leases that ran out, read per scrape by the client library's exposition; a catalog without metrics
installed is not this test's business (the extra is in `test`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from cachekeeper.catalog import Catalog
from cachekeeper.dashboard.app import create_app

from .conftest import value


@pytest.fixture
def catalog(catalog_url: str) -> Iterator[Catalog]:
    with Catalog.open(catalog_url, auto_migrate=True) as c:
        yield c


def test_queue_jobs_and_expired_leases_are_counted_per_scrape(catalog: Catalog) -> None:
    fp = "f" * 16
    catalog.enqueue([(fp, f"{i:064x}", "{}") for i in range(4)])
    client = TestClient(create_app(catalog))
    text = client.get("/metrics").text
    assert value(text, "cachekeeper_queue_jobs", status="pending") == 4
    assert value(text, "cachekeeper_queue_jobs", status="running") == 0
    assert value(text, "cachekeeper_queue_expired_leases") == 0
    short = catalog.claim("dying-worker", lease_s=0.2)
    long = catalog.claim("live-worker", lease_s=600)
    assert short is not None and long is not None
    time.sleep(0.5)   # the first worker never renews
    text = client.get("/metrics").text
    assert value(text, "cachekeeper_queue_jobs", status="pending") == 2
    assert value(text, "cachekeeper_queue_jobs", status="running") == 2
    assert value(text, "cachekeeper_queue_expired_leases") == 1, "only the lease that ran out"
    assert client.get("/metrics").headers["content-type"].startswith("text/plain; version=")


def test_served_but_not_prebuilt_shapes_are_counted_per_toolchain(catalog: Catalog) -> None:
    table = {"toolchains": {"a" * 16: [{"shape": "1x1x1"}, {"shape": "2x2x1"}], "b" * 16: [{"shape": "3x3x1"}]}}
    text = TestClient(create_app(catalog, lambda: table)).get("/metrics").text
    assert value(text, "cachekeeper_served_not_prebuilt_shapes", fingerprint="a" * 16) == 2
    assert value(text, "cachekeeper_served_not_prebuilt_shapes", fingerprint="b" * 16) == 1
    plain = TestClient(create_app(catalog)).get("/metrics").text
    assert "cachekeeper_served_not_prebuilt_shapes{" not in plain and "cachekeeper_coverage_ratio{" not in plain

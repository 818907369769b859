"""On Postgres, hydrate's lookup and coverage's find use their indexes once the table is big."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, Select, create_engine, insert, text

from cachekeeper.catalog import Catalog
from cachekeeper.catalog.catalog import find_query, lookup_query
from cachekeeper.catalog.db import parse_url
from cachekeeper.catalog.models import FingerprintModel, ManifestModel
from tests.harness.postgres import PostgresServer

pytestmark = pytest.mark.services

FPS, MODELS, ENTRIES = 10, 10, 30


@pytest.fixture(scope="module")
def engine(postgres_server: PostgresServer) -> Iterator[Engine]:
    import psycopg

    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE explain")
    url = postgres_server.url("explain")
    with Catalog.open(url, auto_migrate=True):
        pass
    eng = create_engine(parse_url(url))
    at = datetime.now(UTC)
    fps = [{"id": f"{f:016x}", "backend": "inductor", "fields": {}, "first_seen": at} for f in range(FPS)]
    rows = [{"digest": f"{f:04x}{m:04x}{e:056x}", "key": f"manifests/{f:016x}/{m:04x}{e:028x}.json", "kind": "entry",
             "name": f"{m:04x}{e:028x}", "fingerprint_id": f"{f:016x}", "entry_key": f"{m:04x}{e:028x}",
             "backend": "inductor", "model": f"model-{m}", "total_size": 1, "file_count": 1, "blob_count": 1,
             "created_at": at, "store_url": "file:///s", "build": {}}
            for f in range(FPS) for m in range(MODELS) for e in range(ENTRIES)]
    with eng.begin() as conn:
        conn.execute(insert(FingerprintModel), fps)
        conn.execute(insert(ManifestModel), rows)
        conn.execute(text("ANALYZE manifests"))
    yield eng
    eng.dispose()
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute("DROP DATABASE explain WITH (FORCE)")


def plan(engine: Engine, query: Select[object]) -> str:
    sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        return "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {sql}")))


def test_lookup_uses_the_fingerprint_name_index(engine: Engine) -> None:
    names = [f"{3:04x}{e:028x}" for e in range(5)]
    assert "uq_manifests_fingerprint_id_name" in plan(engine, lookup_query(f"{4:016x}", names))


def test_coverage_uses_the_backend_model_index(engine: Engine) -> None:
    within_one = find_query(f"{4:016x}", "inductor", "model-3", "entry")
    across_all = find_query(None, "inductor", "model-3", "entry")
    assert "ix_manifests_backend_model_fingerprint_id" in plan(engine, within_one)
    assert "ix_manifests_backend_model_fingerprint_id" in plan(engine, across_all)

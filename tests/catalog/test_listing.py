"""`ls` streams: text lines and JSON lines rendered from the database, the same on SQLite and Postgres,
with the fields and values `find` returns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.catalog import Catalog, db, listing
from cachekeeper.catalog.listing import FIELDS, direct_lines
from cachekeeper.errors import CatalogURLError

from .helpers import FP2, entry, shared


def test_json_lines_carry_every_field_of_the_row_with_the_same_values(catalog: Catalog) -> None:
    manifests = [entry("flux", height=64), entry("flux", height=128, host="b2"), entry("unet", fp=FP2)]
    for m in [*manifests, shared()]:
        catalog.record(m, store_url="s3://bucket/ck")
    rows = sorted(catalog.find(), key=lambda r: (r.fingerprint_id, r.name))   # ls: by toolchain, then key
    lines = [line for batch in catalog.listing(as_json=True) for line in batch]

    docs = [json.loads(line) for line in lines]
    assert [tuple(d) for d in docs] == [FIELDS] * 3            # every field, in CatalogRow's order
    for doc, row in zip(docs, rows, strict=True):              # shared sets left out
        assert doc == {**row.__dict__, "created_at": str(row.created_at), "spec": dict(row.spec or {}),
                       "build": dict(row.build)}


def test_text_lines_and_filters_match_find(catalog: Catalog) -> None:
    for m in (entry("flux", height=64), entry("unet"), entry("unet", fp=FP2)):
        catalog.record(m, store_url="file:///s")
    unet = [line for batch in catalog.listing(model="unet") for line in batch]
    expected = sorted([r.fingerprint_id, r.name[:12]] for r in catalog.find(model="unet"))
    assert [line.split()[:2] for line in unet] == expected
    assert unet[0].endswith("0.0 MB  2 files") and " unet/transformer full 64x64x1 float32 " in unet[0]
    assert [line for batch in catalog.listing(fingerprint_id=FP2.id, as_json=True) for line in batch] != []
    assert list(catalog.listing(backend="neuron")) == []


# --- without SQLAlchemy ------------------------------------------------------------------------------


def _direct(url: str, **filters: Any) -> list[str] | None:
    found = direct_lines(url, **{"fingerprint_id": None, "backend": None, "model": None, "kind": "entry",
                                 "as_json": False, **filters})
    return None if found is None else [line for batch in found for line in batch]


def test_the_driver_alone_lists_what_the_catalog_lists(catalog: Catalog, catalog_url: str) -> None:
    for m in (entry("flux", height=64), entry("unet"), entry("unet", fp=FP2), shared()):
        catalog.record(m, store_url="file:///s")
    for filters in ({}, {"model": "unet"}, {"fingerprint_id": FP2.id}, {"backend": "neuron"}):
        for as_json in (False, True):
            listed = [line for batch in catalog.listing(**filters, as_json=as_json) for line in batch]
            assert _direct(catalog_url, **filters, as_json=as_json) == listed, (filters, as_json)


def test_the_driver_steps_aside_for_what_the_catalog_must_handle(catalog: Catalog, catalog_url: str,
                                                                 tmp_path: Path) -> None:
    assert _direct(f"sqlite:///{tmp_path / 'not-yet.db'}") is None     # the Catalog creates and migrates it
    assert not (tmp_path / "not-yet.db").exists()
    assert _direct("sqlite://") is None
    with pytest.raises(CatalogURLError, match="supported: sqlite:///path"):   # a usage error, not a fallback
        _direct("mysql://h/db")
    catalog.downgrade("0002")                                           # an older schema: upgrade, or one line
    assert _direct(catalog_url) is None
    catalog.upgrade()
    assert _direct(catalog_url) == []


def test_what_the_driver_path_mirrors_of_db_py_agrees_with_it() -> None:
    # The version table, timeouts and default URL are shared (settings.py); these two are its own.
    assert listing.head_revision() == db.head()
    url = "postgresql+psycopg://ck:s3cret@db.example:5432/ck"
    assert listing._mask(url) == db.mask(db.parse_url(url))


def test_ls_imports_no_sqlalchemy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog.open(url, auto_migrate=True) as catalog:
        catalog.record(entry("flux"), store_url="file:///s")
    script = ("import sys; from cachekeeper.cli import main; sys.argv = ['cachekeeper', 'ls', '--json', '--catalog', "
              f"{url!r}]\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'alembic'}))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    lines = done.stdout.splitlines()
    assert json.loads(lines[0])["model"] == "flux" and lines[-1] == "[]"

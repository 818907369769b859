"""`ls` streams: text lines and JSON lines rendered from the database, the same on SQLite and Postgres,
with the fields and values `find` returns."""

from __future__ import annotations

import json

from cachekeeper.catalog import Catalog
from cachekeeper.catalog.listing import FIELDS

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

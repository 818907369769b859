"""record / find / lookup / fingerprints / forget: the index hydrate and coverage read."""

from __future__ import annotations

import dataclasses

import pytest

from cachekeeper.catalog import Catalog, CatalogRow
from cachekeeper.errors import ManifestError

from .helpers import FP, FP2, NEURON, entry, shared

STORE = "file:///srv/store"


def test_a_recorded_entry_is_found_with_its_spec_columns(catalog: Catalog) -> None:
    m = entry("flux", height=512, width=768, batch=2, dtype="bfloat16")
    catalog.record(m, store_url=STORE)

    [row] = catalog.find()
    assert (row.digest, row.key, row.kind, row.name, row.entry_key) == (m.digest, m.key, "entry", m.name, m.name)
    assert (row.fingerprint_id, row.backend, row.model, row.component, row.mode) == (
        FP.id, "inductor", "flux", "transformer", "full")
    assert (row.height, row.width, row.batch, row.dtype, row.revision) == (512, 768, 2, "bfloat16", "r1")
    assert (row.total_size, row.file_count, row.blob_count, row.store_url) == (120, 2, 2, STORE)
    assert row.entry_spec() == m.spec
    assert row.build == {"host": "builder-1"}
    assert row.created_at.tzinfo is not None


def test_rows_are_frozen_values(catalog: Catalog) -> None:
    catalog.record(entry(), store_url=STORE)
    [row] = catalog.find()
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.model = "other"  # type: ignore[misc]


def test_recording_the_same_manifest_twice_keeps_one_row(catalog: Catalog) -> None:
    m = entry()
    catalog.record(m, store_url=STORE)
    [first] = catalog.find()
    catalog.record(m, store_url=STORE)
    assert catalog.find() == [first]


def test_a_republished_key_replaces_the_old_digest(catalog: Catalog) -> None:
    old, new = entry(host="a"), entry(host="b")
    assert old.key == new.key and old.digest != new.digest
    catalog.record(old, store_url=STORE)
    catalog.record(new, store_url=STORE)
    assert [r.digest for r in catalog.find()] == [new.digest]


def test_shared_manifests_have_no_entry_key_and_are_found_by_kind(catalog: Catalog) -> None:
    catalog.record(entry(), store_url=STORE)
    catalog.record(shared("pch-1"), store_url=STORE)

    [row] = catalog.find(kind="shared")
    assert (row.name, row.entry_key, row.model, row.backend, row.spec) == ("pch-1", None, None, "inductor", None)
    assert [r.kind for r in catalog.find()] == ["entry"]


def test_find_filters_by_fingerprint_backend_and_model(catalog: Catalog) -> None:
    rows = [entry("flux"), entry("flux", height=128), entry("unet"), entry("flux", fp=FP2), entry("flux", fp=NEURON)]
    for m in rows:
        catalog.record(m, store_url=STORE)

    def names(found: list[CatalogRow]) -> set[str]:
        return {r.name for r in found}

    assert names(catalog.find(backend="inductor", model="flux", fingerprint_id=FP.id)) == {rows[0].name, rows[1].name}
    assert names(catalog.find(backend="inductor", model="flux")) == {rows[0].name, rows[1].name, rows[3].name}
    assert names(catalog.find(fingerprint_id=FP.id)) == {rows[0].name, rows[1].name, rows[2].name}
    assert names(catalog.find(backend="neuron")) == {rows[4].name}
    assert catalog.find(model="nope") == []


def test_lookup_returns_the_known_names_only(catalog: Catalog) -> None:
    a, b, other_fp = entry("flux"), entry("unet"), entry("sdxl", fp=FP2)
    for m in (a, b, other_fp):
        catalog.record(m, store_url=STORE)

    found = catalog.lookup(FP.id, [a.name, b.name, other_fp.name, "0" * 32])
    assert {name: row.digest for name, row in found.items()} == {a.name: a.digest, b.name: b.digest}
    assert catalog.lookup(FP2.id, [a.name]) == {}
    assert catalog.lookup(FP.id, []) == {}


def test_lookup_of_many_names_spans_several_queries(catalog: Catalog) -> None:
    wanted = [entry("m", height=8 * (i + 1)) for i in range(3)]
    for m in wanted:
        catalog.record(m, store_url=STORE)
    misses = [f"{i:032x}" for i in range(1200)]      # more than one IN (...) chunk
    found = catalog.lookup(FP.id, misses[:600] + [m.name for m in wanted] + misses[600:])
    assert sorted(found) == sorted(m.name for m in wanted)


def test_fingerprints_report_entry_counts_and_sizes(catalog: Catalog) -> None:
    for m in (entry("flux"), entry("unet", sizes=(5,)), shared("pch-1", size=1000), entry("flux", fp=FP2)):
        catalog.record(m, store_url=STORE)

    by_id = {f.id: f for f in catalog.fingerprints()}
    assert set(by_id) == {FP.id, FP2.id}
    assert (by_id[FP.id].entries, by_id[FP.id].shared, by_id[FP.id].total_size) == (2, 1, 120 + 5 + 1000)
    assert (by_id[FP2.id].entries, by_id[FP2.id].shared, by_id[FP2.id].total_size) == (1, 0, 120)
    assert by_id[FP.id].fields == dict(FP.fields)
    assert by_id[FP.id].backend == "inductor"


def test_a_fingerprint_keeps_its_first_seen_time(catalog: Catalog) -> None:
    catalog.record(entry("flux"), store_url=STORE)
    [before] = catalog.fingerprints()
    catalog.record(entry("unet"), store_url=STORE)
    [after] = catalog.fingerprints()
    assert after.first_seen == before.first_seen


def test_forget_drops_one_row_and_ignores_unknown_digests(catalog: Catalog) -> None:
    a, b = entry("flux"), entry("unet")
    catalog.record(a, store_url=STORE)
    catalog.record(b, store_url=STORE)
    catalog.forget(a.digest)
    catalog.forget("f" * 64)
    assert [r.digest for r in catalog.find()] == [b.digest]


def test_a_manifest_of_unknown_kind_is_refused(catalog: Catalog) -> None:
    odd = dataclasses.replace(shared(), kind="weird")
    with pytest.raises(ManifestError, match="unknown manifest kind"):
        catalog.record(odd, store_url=STORE)
    assert catalog.find(kind="weird") == []

"""rebuild: the catalog is an index the store can always recreate; bad objects are reported, not raised."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachekeeper.catalog import Catalog
from cachekeeper.errors import ObjectNotFound, StoreUnreachable
from cachekeeper.format.layout import manifest_key
from cachekeeper.stores.file import FileStore
from cachekeeper.stores.memory import MemoryStore

from .helpers import FP, FP2, entry, publish, shared


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "store")


def test_rebuild_records_every_manifest_in_the_store(catalog: Catalog, store: FileStore) -> None:
    manifests = [entry("flux"), entry("unet"), entry("flux", fp=FP2), shared("pch-1")]
    publish(store, *manifests)

    report = catalog.rebuild(store)

    assert report.added == tuple(sorted(m.key for m in manifests))
    assert (report.removed, report.invalid, report.unchanged) == ((), (), 0)
    assert {r.digest for r in catalog.find() + catalog.find(kind="shared")} == {m.digest for m in manifests}
    assert {r.store_url for r in catalog.find()} == {store.url}


def test_invalid_objects_are_reported_with_their_key(catalog: Catalog, store: FileStore) -> None:
    good, pretty, misplaced = entry("flux"), entry("unet"), entry("sdxl")
    publish(store, good)
    corrupt_key = manifest_key(FP.id, "0" * 32)
    hostile = good.to_dict() | {"files": [good.to_dict()["files"][0] | {"path": "../../etc/passwd"}]}
    hostile_key = manifest_key(FP.id, "1" * 32)
    store.put_bytes(corrupt_key, b"{not json")
    store.put_bytes(hostile_key, json.dumps(hostile).encode())
    store.put_bytes(pretty.key, json.dumps(pretty.to_dict(), indent=2).encode())   # valid, but not canonical
    store.put_bytes(manifest_key(FP.id, "2" * 32), misplaced.to_bytes())

    report = catalog.rebuild(store)

    assert report.added == (good.key,)
    reasons = dict(report.invalid)
    assert sorted(reasons) == sorted([corrupt_key, hostile_key, pretty.key, manifest_key(FP.id, "2" * 32)])
    assert "malformed" in reasons[corrupt_key]
    assert "unsafe path" in reasons[hostile_key]
    assert "canonical" in reasons[pretty.key]
    assert misplaced.key in reasons[manifest_key(FP.id, "2" * 32)]
    assert [r.digest for r in catalog.find()] == [good.digest]


def test_rebuild_drops_rows_whose_manifest_is_gone(catalog: Catalog, store: FileStore) -> None:
    kept, deleted = entry("flux"), entry("unet")
    publish(store, kept, deleted)
    catalog.rebuild(store)
    store.delete(deleted.key)

    report = catalog.rebuild(store)

    assert (report.added, report.removed, report.unchanged) == ((), (deleted.key,), 1)
    assert [r.digest for r in catalog.find()] == [kept.digest]


def test_a_row_whose_object_was_corrupted_is_dropped_and_reported(catalog: Catalog, store: FileStore) -> None:
    m = entry()
    catalog.record(m, store_url=store.url)
    store.put_bytes(m.key, b"garbage")

    report = catalog.rebuild(store)

    assert report.removed == (m.key,)
    assert [key for key, _ in report.invalid] == [m.key]
    assert catalog.find() == []


def test_a_second_rebuild_changes_nothing(catalog: Catalog, store: FileStore) -> None:
    publish(store, entry("flux"), entry("unet"))
    catalog.rebuild(store)
    before = catalog.find()

    report = catalog.rebuild(store)

    assert (report.added, report.removed, report.invalid, report.unchanged) == ((), (), (), 2)
    assert catalog.find() == before


class FlakyStore(MemoryStore):
    """Lists its manifests but cannot read them: the network went away mid-rebuild."""

    def get_bytes(self, key: str) -> bytes:
        raise StoreUnreachable(f"memory://{key}: connection reset")


class VanishingStore(MemoryStore):
    """An object deleted between listing and reading (a concurrent gc) is simply not there."""

    def list(self, prefix: str = "") -> Iterator[str]:
        yield from super().list(prefix)
        yield manifest_key(FP.id, "9" * 32)

    def get_bytes(self, key: str) -> bytes:
        if key.endswith("9" * 32 + ".json"):
            raise ObjectNotFound(key)
        return super().get_bytes(key)


def test_a_store_failure_aborts_the_rebuild_and_keeps_the_rows(catalog: Catalog) -> None:
    m = entry()
    catalog.record(m, store_url="memory://")
    store = FlakyStore()
    publish(store, m)

    with pytest.raises(StoreUnreachable):
        catalog.rebuild(store)
    assert [r.digest for r in catalog.find()] == [m.digest]


def test_an_object_that_vanishes_during_the_rebuild_is_neither_added_nor_invalid(catalog: Catalog) -> None:
    store = VanishingStore()
    m = entry()
    publish(store, m)

    report = catalog.rebuild(store)

    assert (report.added, report.invalid) == ((m.key,), ())

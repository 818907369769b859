"""One inventory scan serves gc, verify, catalog rebuild and show: what it classifies, and what each reads from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachekeeper.admin.gc import plan_gc
from cachekeeper.admin.verify import repair, verify_store
from cachekeeper.catalog.rebuild import NOT_A_MANIFEST_KEY, indexable
from cachekeeper.format.layout import blob_key, captured_set_name, manifest_key, matching, signature_key
from cachekeeper.format.manifest import KIND_CAPTURED, Manifest
from cachekeeper.stores.file import FileStore
from cachekeeper.stores.inventory import scan
from cachekeeper.stores.manifests import manifest_keys
from cachekeeper.stores.memory import MemoryStore

from ..catalog.helpers import FP, FP2, entry, publish, shared

NOW = 1_000_000.0


def _with_blobs(store: MemoryStore, *manifests: Manifest) -> None:
    for m in manifests:
        for b in m.blobs:
            store.put_bytes(blob_key(b.digest), b"x" * b.size)
    publish(store, *manifests)


def _captured(extends: str) -> Manifest:
    base = entry("captured-src")
    return Manifest(KIND_CAPTURED, captured_set_name("1" * 16), FP, base.files, base.blobs,
                    provenance={"extends": [extends]})


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


def test_every_object_under_manifests_is_classified_once(store: MemoryStore) -> None:
    good, misplaced, pretty = entry("flux"), entry("sdxl"), entry("unet")
    _with_blobs(store, good)
    store.put_bytes(manifest_key(FP.id, "0" * 32), b"{not json")
    store.put_bytes(manifest_key(FP.id, "2" * 32), misplaced.to_bytes())
    store.put_bytes(pretty.key, json.dumps(pretty.to_dict(), indent=2).encode())
    store.put_bytes(f"manifests/{FP.id}/README", b"notes")

    inv = scan(store)

    assert set(inv.filed()) == {good.key}
    assert set(inv.manifests) == {good.key, manifest_key(FP.id, "2" * 32), pretty.key}
    assert "malformed" in inv.unreadable[manifest_key(FP.id, "0" * 32)]
    assert not inv.unreadable[manifest_key(FP.id, "0" * 32)].startswith("manifests/")   # the bare reason
    assert misplaced.key in inv.misfiled[manifest_key(FP.id, "2" * 32)]
    assert "canonical" in inv.misfiled[pretty.key]
    assert inv.strays == (f"manifests/{FP.id}/README",)
    assert inv.blob_sizes() == {b.digest: b.size for b in good.blobs}


def test_rebuild_reports_strays_beside_the_unreadable_and_misfiled(store: MemoryStore) -> None:
    good = entry("flux")
    publish(store, good)
    store.put_bytes(f"manifests/{FP.id}/README", b"notes")

    found = indexable(scan(store, objects=False, debris=False))

    assert list(found.manifests) == [good.digest]
    assert found.invalid == ((f"manifests/{FP.id}/README", NOT_A_MANIFEST_KEY),)


def test_gc_keeps_the_blobs_of_a_misfiled_manifest_and_never_deletes_an_unreadable_one(store: MemoryStore) -> None:
    misplaced = entry("sdxl")
    for b in misplaced.blobs:
        store.put_bytes(blob_key(b.digest), b"x" * b.size)
    store.put_bytes(manifest_key(FP.id, "2" * 32), misplaced.to_bytes())
    store.put_bytes(manifest_key(FP.id, "0" * 32), b"{not json")

    plan = plan_gc(scan(store), set(), min_age=0)

    assert plan.delete_blobs == [] and plan.keep_blobs == len(misplaced.blobs)
    assert plan.unreadable == [manifest_key(FP.id, "0" * 32)] and plan.delete_manifests == []


def test_gc_drops_a_toolchain_with_its_signatures_and_keeps_the_other(store: MemoryStore) -> None:
    old, new = entry("flux", fp=FP2), entry("unet")
    _with_blobs(store, old, new)
    store.put_bytes(signature_key(old.digest), b"{}")
    store.put_bytes(signature_key(new.digest), b"{}")

    plan = plan_gc(scan(store), {FP2.id}, min_age=3600)

    assert plan.delete_manifests == [old.key] and plan.delete_signatures == [signature_key(old.digest)]
    assert plan.young == len(old.blobs)   # just released, still inside the grace window


def test_an_object_that_vanishes_between_listing_and_reading_is_left_out() -> None:
    class Vanishing(MemoryStore):
        def get_bytes(self, key: str) -> bytes:
            self.delete(key)   # a concurrent gc
            return super().get_bytes(key)

    store = Vanishing()
    publish(store, entry())
    inv = scan(store)
    assert (inv.manifests, inv.unreadable) == ({}, {})


def test_verify_reads_sizes_from_the_listing_and_names_the_unreadable_reason(store: MemoryStore) -> None:
    good, truncated = entry("flux"), entry("unet", sizes=(300,))
    _with_blobs(store, good, truncated)
    store.objects[blob_key(truncated.blobs[0].digest)] = b"short"   # objects are write-once: by hand
    store.put_bytes(manifest_key(FP.id, "0" * 32), b"{not json")
    inv = scan(store, debris=False)

    problems = list(verify_store(store, inv))

    assert [(p.key, p.blob) for p in problems] == sorted([(manifest_key(FP.id, "0" * 32), None),
                                                          (truncated.key, truncated.blobs[0].digest)])
    assert "malformed" in next(p.what for p in problems if p.blob is None)
    store.put_bytes(signature_key(truncated.digest), b"{}")
    removed = repair(store, inv, problems)
    assert blob_key(truncated.blobs[0].digest) in removed and not store.exists(truncated.key)
    assert not store.exists(signature_key(truncated.digest)) and store.exists(good.key)


def test_listing_finds_entries_captured_sets_and_prefixes_without_reading(store: MemoryStore) -> None:
    flux, pch, cap = entry("flux"), shared("pch-1"), _captured("x")
    publish(store, flux, pch, cap, entry("unet", fp=FP2))
    store.put_bytes(f"manifests/{FP.id}/README", b"notes")

    assert [mk.name for mk in manifest_keys(store, FP.id, captured=False)] == sorted([flux.name, pch.name])
    assert [mk.name for mk in manifest_keys(store, FP.id, captured=True)] == [cap.name]
    assert len(manifest_keys(store)) == 4
    every = manifest_keys(store)
    assert [mk.key for mk in matching(every, flux.name[:12])] == [flux.key]
    assert [mk.key for mk in matching(every, "1" * 8)] == [cap.key]            # a captured set by its id
    assert [mk.key for mk in matching(every, "captured/1")] == [cap.key]       # or by its name


def test_debris_is_listed_only_when_asked(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    tmp = tmp_path / "store" / "blobs" / "sha256" / "ab" / ".abcd.123.456.ck-tmp"
    tmp.parent.mkdir(parents=True)
    tmp.write_bytes(b"half a blob")
    assert [d.key for d in scan(store).debris] == ["blobs/sha256/ab/.abcd.123.456.ck-tmp"]
    assert scan(store, debris=False).debris == () and scan(store, objects=False).blobs == ()

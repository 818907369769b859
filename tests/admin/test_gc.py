"""GC plans are pure: what is referenced stays, what is old and unreferenced goes, young orphans wait."""

from __future__ import annotations

from pathlib import Path

from cachekeeper.admin.gc import plan_gc, run_gc
from cachekeeper.format.layout import blob_key
from cachekeeper.publish.upload import publish
from cachekeeper.stores.base import ObjectInfo
from cachekeeper.stores.file import FileStore
from cachekeeper.stores.inventory import Inventory, scan
from tests.builders import fingerprint, spec, write_tree

NOW = 1_000_000.0


def test_young_unreferenced_blobs_are_kept_and_old_ones_planned_for_deletion() -> None:
    blobs = [ObjectInfo("blobs/sha256/aa/old", 1, NOW - 7200), ObjectInfo("blobs/sha256/bb/young", 1, NOW - 60)]
    plan = plan_gc(Inventory(blobs=tuple(blobs)), set(), min_age=3600, now=NOW)
    assert plan.delete_blobs == ["blobs/sha256/aa/old"] and plan.young == 1


def test_referenced_blobs_stay_and_a_dropped_toolchain_releases_them(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    old = publish(store, fingerprint=fingerprint("old"), spec=spec(), roots={"cache": write_tree(tmp_path / "a",
                  {"x": b"old bytes"})}, include=lambda r, p, f: True).manifest
    new = publish(store, fingerprint=fingerprint("new"), spec=spec(), roots={"cache": write_tree(tmp_path / "b",
                  {"x": b"new bytes"})}, include=lambda r, p, f: True).manifest
    keep = plan_gc(scan(store), set(), min_age=0)
    assert keep.delete_blobs == [] and keep.keep_blobs == 2
    plan = plan_gc(scan(store), {old.fingerprint.id}, min_age=0)
    assert plan.delete_manifests == [old.key] and plan.delete_blobs == [blob_key(old.blobs[0].digest)]
    run_gc(store, plan)
    assert not store.exists(old.key) and store.exists(new.key) and store.exists(blob_key(new.blobs[0].digest))


def test_debris_of_killed_publishers_waits_out_the_grace_window_then_goes() -> None:
    from cachekeeper.stores.base import Debris

    old = Debris("blobs/sha256/aa/.x.1.2.ck-tmp", "temp", NOW - 7200, 10)
    young = Debris("blobs/sha256/bb/big", "multipart", NOW - 60, upload_id="u1")
    plan = plan_gc(Inventory(debris=(young, old)), set(), min_age=3600, now=NOW)
    assert plan.delete_debris == [old] and plan.young_debris == 1


def test_gc_run_removes_a_killed_publishers_temp_file_from_a_file_store(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    tmp = tmp_path / "store" / "blobs" / "sha256" / "ab" / ".abcd.123.456.ck-tmp"
    tmp.parent.mkdir(parents=True)
    tmp.write_bytes(b"half a blob")
    plan = plan_gc(scan(store), set(), min_age=0)
    assert [d.key for d in plan.delete_debris] == ["blobs/sha256/ab/.abcd.123.456.ck-tmp"]
    run_gc(store, plan)
    assert not tmp.exists()

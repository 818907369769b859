"""Hydrate: exactly the artifacts for this toolchain, every byte verified, nothing partial."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.config.hydrate import HydrateOptions
from cachekeeper.errors import IntegrityError, NothingToHydrate, ToolchainMismatch, UnsafePath
from cachekeeper.format.layout import blob_key
from cachekeeper.format.manifest import Manifest
from cachekeeper.hydration.engine import HydrateReport, Target, hydrate
from cachekeeper.hydration.plan import coalesce, plan_hydrate
from cachekeeper.hydration.resolve import Pin
from cachekeeper.publish import snapshot
from cachekeeper.publish.upload import publish
from cachekeeper.stores.file import FileStore

from .helpers import fingerprint, read_tree, spec, write_tree

BUILD = {"a/1.neff": b"one" * 100, "a/2.neff": b"two" * 100, "b/3.neff": b"three",
         "big.bin": os.urandom(snapshot.SMALL_FILE + 3)}


def _publish(store: FileStore, root: Path, toolchain: str = "1", model: str = "tiny") -> Manifest:
    return publish(store, fingerprint=fingerprint(toolchain), spec=spec(model), roots={"cache": root},
                   include=lambda root, rel, path: True).manifest


def _hydrate(store: FileStore, dest: Path, toolchain: str = "1", pins: list[Pin] | None = None,
             **settings: Any) -> HydrateReport:
    return hydrate(Target(fingerprint(toolchain), dest, pins), HydrateOptions(**settings), lambda: store)


@pytest.fixture()
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "store")


@pytest.fixture()
def published(store: FileStore, tmp_path: Path) -> Manifest:
    return _publish(store, write_tree(tmp_path / "build", BUILD))


def test_hydrate_reproduces_the_build_byte_for_byte(store: FileStore, published: Manifest, tmp_path: Path) -> None:
    report = _hydrate(store, tmp_path / "dest", pins=[Pin(published.name)])
    assert read_tree(tmp_path / "dest") == BUILD
    assert report.files_fetched == len(BUILD) and not report.noop


def test_a_repeat_hydrate_of_a_lockfile_is_a_noop_that_does_not_open_the_store(
        store: FileStore, published: Manifest, tmp_path: Path) -> None:
    _hydrate(store, tmp_path / "dest", pins=[Pin(published.name)])

    def no_store() -> FileStore:
        raise AssertionError("the store was opened on a no-op hydrate")

    report = hydrate(Target(fingerprint(), tmp_path / "dest", [Pin(published.name, published.digest)]),
                     HydrateOptions(), no_store)
    assert report.noop and report.files_total == len(BUILD)


def test_a_repeat_hydrate_whose_store_is_down_is_still_a_noop(store: FileStore, published: Manifest,
                                                              tmp_path: Path) -> None:
    """A config hydrate lists captured sets once on a no-op (tests/capture/test_captured_later.py); a
    store that does not answer then leaves what is in place in place."""
    from cachekeeper.errors import StoreUnreachable

    _hydrate(store, tmp_path / "dest", pins=[Pin(published.name)])

    def down() -> FileStore:
        raise StoreUnreachable("the endpoint does not answer")

    report = hydrate(Target(fingerprint(), tmp_path / "dest", [Pin(published.name)]), HydrateOptions(), down)
    assert report.noop and report.files_total == len(BUILD)


class ClosingStore(FileStore):
    closed = 0

    def close(self) -> None:
        ClosingStore.closed += 1
        super().close()


def test_hydrate_closes_the_store_it_opened_on_success_and_on_a_miss(published: Manifest, tmp_path: Path) -> None:
    ClosingStore.closed = 0
    opened = ClosingStore(tmp_path / "store")
    _hydrate(opened, tmp_path / "dest", pins=[Pin(published.name)])
    assert ClosingStore.closed == 1
    with pytest.raises(NothingToHydrate):
        _hydrate(opened, tmp_path / "other", pins=[Pin("0" * 32)])
    assert ClosingStore.closed == 2


def test_a_changed_local_file_is_detected_and_repaired(store: FileStore, published: Manifest, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    _hydrate(store, dest, pins=[Pin(published.name)])
    (dest / "a/1.neff").write_bytes(b"tampered")
    (dest / "b/3.neff").unlink()
    report = _hydrate(store, dest, pins=[Pin(published.name)])
    assert report.files_fetched == 2
    assert read_tree(dest) == BUILD


def test_files_already_present_with_the_right_bytes_are_adopted_not_refetched(
        store: FileStore, published: Manifest, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    _hydrate(store, dest, pins=[Pin(published.name)])
    state = dest / ".cachekeeper" / "state.json"  # as a kill -9 leaves it: claimed, no files recorded
    doc = json.loads(state.read_bytes())
    doc["files"], doc["manifests"] = {}, {}
    state.write_text(json.dumps(doc))
    report = _hydrate(store, dest, pins=[Pin(published.name)])
    assert report.files_fetched == 0 and report.files_verified_local == len(BUILD)


def test_a_corrupted_blob_fails_the_hydrate_and_nothing_of_it_appears(
        store: FileStore, published: Manifest, tmp_path: Path) -> None:
    big = next(f for f in published.files if f.path == "big.bin")
    path = store.root / blob_key(big.blob)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        _hydrate(store, tmp_path / "dest", pins=[Pin(published.name)])
    assert not (tmp_path / "dest" / "big.bin").exists()
    assert not list((tmp_path / "dest").rglob("*.ck-tmp"))
    state = json.loads((tmp_path / "dest" / ".cachekeeper" / "state.json").read_bytes())
    assert "cache/big.bin" not in state["files"] and state["manifests"] == {}  # verified files are kept


def test_a_corrupted_pack_member_is_refused_even_through_a_ranged_read(
        store: FileStore, published: Manifest, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    _hydrate(store, dest, pins=[Pin(published.name)])
    rec = next(f for f in published.files if f.path == "b/3.neff")
    pack = store.root / blob_key(rec.blob)
    data = bytearray(pack.read_bytes())
    data[rec.offset] ^= 0xFF
    pack.write_bytes(bytes(data))
    (dest / "b/3.neff").unlink()  # one small member missing: fetched by a ranged read of the pack
    with pytest.raises(IntegrityError):
        _hydrate(store, dest, pins=[Pin(published.name)])
    assert not (dest / "b/3.neff").exists()


def test_a_manifest_for_another_toolchain_is_never_used(store: FileStore, tmp_path: Path) -> None:
    m = _publish(store, write_tree(tmp_path / "b", BUILD), toolchain="old-compiler")
    # Plant it where this host's toolchain would look: the fingerprint inside is checked, not the path.
    fp_dir = store.root / "manifests" / fingerprint("1").id
    fp_dir.mkdir(parents=True)
    (fp_dir / f"{m.name}.json").write_bytes(m.to_bytes())
    with pytest.raises(ToolchainMismatch, match="toolchain: old-compiler"):
        _hydrate(store, tmp_path / "dest", pins=[Pin(m.name)])


def test_a_directory_never_mixes_toolchains(store: FileStore, tmp_path: Path) -> None:
    a = _publish(store, write_tree(tmp_path / "b1", BUILD), toolchain="1")
    b = _publish(store, write_tree(tmp_path / "b2", BUILD), toolchain="2")
    dest = tmp_path / "dest"
    _hydrate(store, dest, toolchain="1", pins=[Pin(a.name)])
    with pytest.raises(ToolchainMismatch):
        _hydrate(store, dest, toolchain="2", pins=[Pin(b.name)])


def test_a_non_empty_unmanaged_directory_is_refused(store: FileStore, published: Manifest, tmp_path: Path) -> None:
    dest = write_tree(tmp_path / "dest", {"someone-elses.neff": b"?"})
    with pytest.raises(ToolchainMismatch, match="did not place"):
        _hydrate(store, dest, pins=[Pin(published.name)])


def test_no_entries_for_this_toolchain_names_the_published_ones_and_how_they_differ(
        store: FileStore, published: Manifest, tmp_path: Path) -> None:
    with pytest.raises(NothingToHydrate, match=r"toolchain='1' \(host '2'\)"):
        _hydrate(store, tmp_path / "dest", toolchain="2")


def test_listing_mode_hydrates_every_entry_of_the_toolchain(store: FileStore, tmp_path: Path) -> None:
    _publish(store, write_tree(tmp_path / "b1", {"x": b"1"}), model="m1")
    _publish(store, write_tree(tmp_path / "b2", {"y": b"2"}), model="m2")
    report = _hydrate(store, tmp_path / "dest")
    assert len(report.manifests) == 2 and read_tree(tmp_path / "dest") == {"x": b"1", "y": b"2"}


def test_missing_entries_are_reported_and_required_ones_fail(store: FileStore, published: Manifest,
                                                             tmp_path: Path) -> None:
    report = _hydrate(store, tmp_path / "d1", pins=[Pin(published.name), Pin("f" * 32)])
    assert report.missing == ["f" * 32]
    with pytest.raises(NothingToHydrate):
        _hydrate(store, tmp_path / "d2", pins=[Pin(published.name), Pin("f" * 32)], require_all=True)


def test_a_pinned_digest_that_does_not_match_is_refused(store: FileStore, published: Manifest, tmp_path: Path) -> None:
    with pytest.raises(IntegrityError, match="lockfile"):
        _hydrate(store, tmp_path / "dest", pins=[Pin(published.name, "0" * 64)])


def test_a_hostile_path_planted_in_the_store_cannot_escape_the_destination(
        store: FileStore, published: Manifest, tmp_path: Path) -> None:
    doc = json.loads(published.to_bytes())
    doc["files"][0]["path"] = "../../outside"
    (store.root / published.key).write_bytes(json.dumps(doc).encode())
    with pytest.raises(UnsafePath):
        _hydrate(store, tmp_path / "dest", pins=[Pin(published.name)])
    assert not (tmp_path / "outside").exists()


def test_plan_keeps_the_first_manifest_for_a_path_claimed_twice(store: FileStore, tmp_path: Path) -> None:
    a = _publish(store, write_tree(tmp_path / "b1", {"same/path": b"A"}), model="m1")
    b = _publish(store, write_tree(tmp_path / "b2", {"same/path": b"B"}), model="m2")
    plan = plan_hydrate([a, b], {"cache": tmp_path / "d"}, None, lambda p, r: "missing")
    assert [p.record.sha256 for ps in plan.fetch.values() for p in ps] == [hashlib.sha256(b"A").hexdigest()]
    assert len(plan.shadowed) == 1


def test_ranged_reads_are_coalesced_across_small_gaps() -> None:
    from cachekeeper.format.manifest import FileRecord
    from cachekeeper.hydration.plan import Placement

    def p(off: int, size: int) -> Placement:
        return Placement(FileRecord("cache", f"f{off}", size, "0" * 64, "b", off), Path(f"/x/{off}"))

    ranges = coalesce([p(0, 10), p(20, 10), p(10_000_000, 5)], gap=100)
    assert [(s, n, len(m)) for s, n, m in ranges] == [(0, 30, 2), (10_000_000, 5, 1)]


@pytest.mark.parametrize("node_cache", [False, True], ids=["direct", "node-cache"])
def test_kill_9_during_hydrate_loses_nothing_and_the_rerun_completes(store: FileStore, tmp_path: Path,
                                                                    node_cache: bool) -> None:
    """With a node cache too: its objects are complete and verified or absent, its per-blob locks die
    with the holder (the rerun does not wait), and the rerun finishes both the node cache and the dest."""
    import subprocess
    import sys
    import time

    files = {f"d/{i:03d}": os.urandom(snapshot.SMALL_FILE + i) for i in range(12)}  # 12 standalone blobs
    m = _publish(store, write_tree(tmp_path / "b", files))
    dest, node = tmp_path / "dest", tmp_path / "node"
    script = f"""
import time
from pathlib import Path
from cachekeeper.stores.file import FileStore
from cachekeeper.hydration.engine import Target, hydrate
from cachekeeper.config.hydrate import HydrateOptions
from cachekeeper.hydration.resolve import Pin
from cachekeeper.format.fingerprint import Fingerprint

class Slow(FileStore):
    def open_range(self, key, start, end, read_timeout, connect_timeout):
        body = super().open_range(key, start, end, read_timeout, connect_timeout)
        chunks = body.chunks

        def slow(size):
            for chunk in chunks(1 << 18):
                time.sleep(0.01)
                yield chunk
        body.chunks = slow
        return body

store = Slow(Path({str(store.root)!r}))
node = dict(node_cache={str(node)!r}, node_cache_link="hardlink") if {node_cache!r} else {{}}
hydrate(Target(Fingerprint.of("fake", {{"toolchain": "1"}}), Path({str(dest)!r}), [Pin({m.name!r})]),
        HydrateOptions(threads=2, **node), lambda: store)
"""
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    # Wait for placed files, not temp files: verified files can wait for their fsync + rename. With a
    # node cache they land there first (the dest is linked once a batch of blobs is in).
    watched, pattern = (node / "objects", "*/*") if node_cache else (dest, "d/*")
    while time.monotonic() < deadline and len([p for p in watched.glob(pattern) if not p.name.endswith(("ck-tmp",
                                                                                                        ".ok"))]) < 2:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    visible = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("d/*")
               if not p.name.endswith("ck-tmp")}
    assert all(files[k] == v for k, v in visible.items())  # whatever is visible is complete and right
    if node_cache:
        objects = [p for p in (node / "objects").glob("*/*") if not p.name.endswith(("ck-tmp", ".ok"))]
        assert 0 < len(objects) < len(files)
        assert all(hashlib.sha256(p.read_bytes()).hexdigest() == p.name for p in objects)  # verified or absent
    else:
        assert 0 < len(visible) < len(files)
    t0 = time.monotonic()
    report = _hydrate(store, dest, pins=[Pin(m.name)],
                      **(dict(node_cache=str(node), node_cache_link="hardlink") if node_cache else {}))
    assert time.monotonic() - t0 < 20        # no lock outlived its dead holder
    assert read_tree(dest) == files
    assert not list(dest.rglob("*.ck-tmp")) and not list(node.rglob("*.ck-tmp"))
    if node_cache:
        assert report.node_linked == len(files) and 0 < report.node_fetched_bytes < sum(map(len, files.values()))
    else:
        assert report.files_verified_local >= 1


def test_an_entry_whose_blob_is_gone_is_a_miss_and_the_rest_still_hydrates(store: FileStore, tmp_path: Path) -> None:
    a = _publish(store, write_tree(tmp_path / "b1", {"a/x": b"A" * 10}), model="m1")
    b = _publish(store, write_tree(tmp_path / "b2", {"b/y": b"B" * 10}), model="m2")
    (store.root / blob_key(b.blobs[0].digest)).unlink()  # e.g. a GC that raced a publisher
    report = _hydrate(store, tmp_path / "dest", pins=[Pin(a.name), Pin(b.name)])
    assert report.missing == [b.name] and report.manifests == [a.name]
    assert read_tree(tmp_path / "dest") == {"a/x": b"A" * 10}
    state = json.loads((tmp_path / "dest" / ".cachekeeper" / "state.json").read_bytes())
    assert list(state["manifests"]) == [a.name]  # the broken entry is retried by the next hydrate
    with pytest.raises(NothingToHydrate, match="lacks blobs"):
        _hydrate(store, tmp_path / "dest2", pins=[Pin(a.name), Pin(b.name)], require_all=True)

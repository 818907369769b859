"""Publishing: blobs first, then the manifest; small files packed, identical files stored once."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cachekeeper.errors import ManifestError, UnsafePath
from cachekeeper.format.layout import blob_key
from cachekeeper.format.manifest import Manifest
from cachekeeper.publish import snapshot
from cachekeeper.publish.upload import publish
from cachekeeper.stores.memory import MemoryStore
from tests.builders import fingerprint, spec, write_tree


def _keep_all(root: str, rel: str, path: Path) -> bool:
    return not rel.endswith(".lock")


def test_thousands_of_small_files_become_a_handful_of_objects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "PACK_TARGET", 256 << 10)
    files = {f"{i % 16:02x}/{i:04d}.neff": bytes([i % 251]) * 1000 + str(i).encode() for i in range(2000)}
    root = write_tree(tmp_path / "cache", files)
    store = MemoryStore()
    result = publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": root}, include=_keep_all)
    blobs = [k for k in store.objects if k.startswith("blobs/")]
    assert len(result.manifest.files) == 2000
    assert 5 <= len(blobs) <= 10  # ~2 MB in 256 KiB packs
    assert all(b.packed for b in result.manifest.blobs)


def test_large_files_are_their_own_blob_named_by_their_sha256(tmp_path: Path) -> None:
    big = b"x" * (snapshot.SMALL_FILE + 1)
    root = write_tree(tmp_path / "cache", {"big.bin": big, "small": b"s"})
    store = MemoryStore()
    m = publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": root}, include=_keep_all).manifest
    rec = next(f for f in m.files if f.path == "big.bin")
    assert rec.blob == rec.sha256 and store.objects[blob_key(rec.blob)] == big


def test_identical_files_are_stored_once(tmp_path: Path) -> None:
    payload = b"y" * (snapshot.SMALL_FILE + 10)
    root = write_tree(tmp_path / "cache", {"a.bin": payload, "b/c.bin": payload})
    store = MemoryStore()
    m = publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": root}, include=_keep_all).manifest
    assert len(m.files) == 2 and len(m.blobs) == 1


def test_the_manifest_is_written_after_its_blobs_and_the_first_writer_wins(tmp_path: Path) -> None:
    store = MemoryStore()
    order: list[str] = []
    original = store.put_bytes
    store.put_bytes = lambda key, data: (order.append(key.split("/")[0]), original(key, data))[1]  # type: ignore[method-assign]
    first = write_tree(tmp_path / "a", {"f": b"first build"})
    second = write_tree(tmp_path / "b", {"f": b"second build, other bytes"})
    r1 = publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": first}, include=_keep_all)
    r2 = publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": second}, include=_keep_all)
    assert order[-1] == "manifests" and order.index("manifests") > order.index("blobs")
    assert r1.created and not r2.created
    assert r2.manifest.digest == r1.manifest.digest  # the racing builder adopts the published one


def test_shared_roots_become_one_manifest_per_toolchain(tmp_path: Path) -> None:
    store = MemoryStore()
    for i, model in enumerate(["m1", "m2"]):
        roots = {"cache": write_tree(tmp_path / f"c{i}", {"k": model.encode()}),
                 "shared": write_tree(tmp_path / f"s{i}", {"header.gch": f"bytes differ {i}".encode()})}
        m = publish(store, fingerprint=fingerprint(), spec=spec(model), roots=roots, include=_keep_all,
                    shared_roots=frozenset({"shared"})).manifest
        assert len(m.requires) == 1 and all(f.root == "cache" for f in m.files)
    shared = [k for k in store.objects if k.startswith("manifests/") and "/shared-" in k]
    assert len(shared) == 1  # the second entry reused the first upload


def test_manifest_roundtrip_keeps_its_digest(tmp_path: Path) -> None:
    store = MemoryStore()
    root = write_tree(tmp_path / "c", {"a": b"1", "b/c": b"22"})
    m = publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": root}, include=_keep_all).manifest
    again = Manifest.from_bytes(store.objects[m.key])
    assert again == m and again.digest == m.digest


@pytest.mark.parametrize("path", ["../escape", "/abs", "a/../../b", "x\x00y"])
def test_a_manifest_with_a_hostile_path_is_refused_at_parse(tmp_path: Path, path: str) -> None:
    store = MemoryStore()
    m = publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": write_tree(tmp_path, {"a": b"1"})},
                include=_keep_all).manifest
    raw = m.to_bytes().replace(b'"path":"a"', b'"path":' + json.dumps(path).encode())
    with pytest.raises(UnsafePath):
        Manifest.from_bytes(raw)


def test_a_manifest_whose_slice_overruns_its_blob_is_refused(tmp_path: Path) -> None:
    store = MemoryStore()
    m = publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": write_tree(tmp_path, {"a": b"1"})},
                include=_keep_all).manifest
    doc = m.to_dict()
    doc["files"][0]["size"] = 99
    with pytest.raises(ManifestError, match="outside its blob"):
        Manifest.from_bytes(json.dumps(doc).encode())


def test_a_corrupt_blob_already_in_the_store_stops_the_publish_with_the_fix(tmp_path: Path) -> None:
    from cachekeeper.errors import IntegrityError

    big = b"z" * (snapshot.SMALL_FILE + 1)
    store = MemoryStore()
    store.put_bytes(blob_key(hashlib.sha256(big).hexdigest()), b"truncated")
    with pytest.raises(IntegrityError, match="expected"):
        publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": write_tree(tmp_path, {"b": big})},
                include=_keep_all)
    assert not [k for k in store.objects if k.startswith("manifests/")]


# --- plan, then execute ------------------------------------------------------------------------------


class _Watched(MemoryStore):
    """Counts existence checks and measures uploads in flight (each upload takes a little while)."""

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.batches: list[int] = []
        self.single_checks = 0
        self.in_flight = self.peak_bytes = self.peak_uploads = self.uploads = 0
        self._watch = threading.Lock()

    def sizes(self, keys: object, *, threads: int = 16) -> dict[str, int | None]:
        wanted = list(keys)  # type: ignore[call-overload]
        self.batches.append(len(wanted))
        return {k: super(_Watched, self).size(k) for k in wanted}

    def size(self, key: str) -> int | None:
        self.single_checks += 1
        return super().size(key)

    def put_bytes(self, key: str, data: bytes) -> bool:
        if not key.startswith("blobs/"):
            return super().put_bytes(key, data)
        import time

        with self._watch:
            self.uploads += 1
            self.in_flight += len(data)
            self.peak_bytes = max(self.peak_bytes, self.in_flight)
            self.peak_uploads = max(self.peak_uploads, self.uploads)
        deadline = time.monotonic() + 2   # linger until a second upload is in flight (if one ever comes)
        while self.peak_uploads < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.01)
        try:
            return super().put_bytes(key, data)
        finally:
            with self._watch:
                self.uploads -= 1
                self.in_flight -= len(data)

    def put_file(self, key: str, path: Path) -> bool:
        return self.put_bytes(key, path.read_bytes())


def test_publish_checks_every_blob_in_one_batch_then_uploads_in_parallel_under_a_byte_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.publish import upload as publish_module

    monkeypatch.setattr(snapshot, "PACK_TARGET", 64 << 10)
    monkeypatch.setattr(publish_module, "MAX_BYTES_IN_FLIGHT", 300 << 10)
    files = {f"{i:03d}.neff": hashlib.sha256(str(i).encode()).digest() * 1000 for i in range(60)}  # 32 KB each
    root = write_tree(tmp_path / "cache", files)
    store = _Watched()

    result = publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": root}, include=_keep_all)

    blobs = len(result.manifest.blobs)
    assert blobs >= 20 and store.batches == [blobs] and store.single_checks == 0
    assert store.peak_uploads > 1, "uploads ran in parallel"
    assert store.peak_bytes <= 300 << 10, "never more bytes in flight than the bound"

    again = publish(store, fingerprint=fingerprint(), spec=spec(height=128), roots={"cache": root},
                    include=_keep_all)
    assert (again.blobs_uploaded, again.blobs_present, again.uploaded_bytes) == (0, blobs, 0)


def test_a_small_file_changed_between_plan_and_upload_is_not_published(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.errors import IntegrityError
    from cachekeeper.publish import upload as publish_module

    root = write_tree(tmp_path / "cache", {"a.neff": b"a" * 100, "b.neff": b"b" * 100})
    plan = publish_module.plan_upload(MemoryStore(), snapshot.scan_roots({"cache": root}, _keep_all))
    (root / "b.neff").write_bytes(b"B" * 100)
    store = MemoryStore()
    with pytest.raises(IntegrityError, match="changed while publishing"):
        publish_module.execute_upload(store, plan.send)
    assert store.objects == {}

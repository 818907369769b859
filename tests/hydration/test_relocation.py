"""Hydrate with relocatable files (format/relocate.py): every file that named the build's root names the
dir it is served from, the guarantees hold (published bytes verified first, the state records the bytes
on disk, a node-cache object is never rewritten), and repeat, incremental and verifying runs keep them."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from cachekeeper.errors import DestinationError
from cachekeeper.format import relocate
from cachekeeper.format.manifest import Manifest
from cachekeeper.hydration.state import load_state
from cachekeeper.publish import snapshot
from cachekeeper.publish.upload import publish
from cachekeeper.stores.memory import MemoryStore
from tests.builders import fingerprint, spec, write_tree
from tests.hydration.helpers import hydrate_into

STEM = relocate.placeholder(relocate.RESERVED)[:len(relocate.STEM)]


def padded_root(tmp_path: Path, name: str) -> Path:
    base = tmp_path / name
    return base / ("cache" + "_" * (relocate.RESERVED - len(str(base)) - 6))


def build(tmp_path: Path, name: str, extra: dict[str, bytes] | None = None) -> Path:
    """A build's cache root: a nested pickle and a Triton group naming the root, a large file naming it twice
    (a blob of its own, at two paths: one is placed as a copy of the other), and a file that does not."""
    root = padded_root(tmp_path, name)
    inner = pickle.dumps({"filename": f"{root}/ab/cabc.py"})
    big = (f"{root}/triton/0/K/k.cubin\n".encode() * 4096)[: snapshot.SMALL_FILE + 100]
    files = {
        "fxgraph/f1/entry": pickle.dumps({"bundle": [inner], "repro": str(root)}),
        "triton/0/K/__grp__k.json": json.dumps({"child_paths": {"k.cubin": f"{root}/triton/0/K/k.cubin"}}).encode(),
        "triton/0/K/k.cubin": b"\x00cubin",
        "ab/cabc.py": b"print('kernel')\n",
        "big/a.txt": big, "big/b.txt": big,
        **(extra or {}),
    }
    return write_tree(root, files)


def publish_build(store: MemoryStore, root: Path, model: str) -> Manifest:
    m = publish(store, fingerprint=fingerprint(), spec=spec(model), roots={"cache": root},
                include=lambda r, rel, p: True, relocatable_roots=frozenset({"cache"})).manifest
    shutil.rmtree(root.parent)   # the build's dir is gone before anything is served
    return m


def names_outside(dest: Path, *needles: bytes) -> list[str]:
    out = []
    for p in dest.rglob("*"):
        if p.is_file() and ".cachekeeper" not in p.parts and any(n in p.read_bytes() for n in needles):
            out.append(str(p.relative_to(dest)))
    return out


@pytest.fixture
def published(tmp_path: Path) -> tuple[MemoryStore, Manifest, bytes]:
    store = MemoryStore()
    root = build(tmp_path, "ck-build-1")
    return store, publish_build(store, root, "tiny"), os.fsencode(str(root))


def test_every_marked_file_names_the_served_dir_and_the_state_records_its_bytes(
        tmp_path: Path, published: tuple[MemoryStore, Manifest, bytes]) -> None:
    store, manifest, builder = published
    marked = {f.path for f in manifest.files if f.relocate}
    assert marked == {"fxgraph/f1/entry", "triton/0/K/__grp__k.json", "big/a.txt", "big/b.txt"}
    assert manifest.to_dict()["schema"] == 3
    dest = tmp_path / "d" / "fp"
    report = hydrate_into(lambda: store, dest, [manifest.name])
    assert report.files_fetched == len(manifest.files)
    assert names_outside(dest, builder, STEM) == []
    state = load_state(dest)
    assert state is not None
    for f in manifest.files:
        data = (dest / f.path).read_bytes()
        assert state.files[f"cache/{f.path}"].sha256 == hashlib.sha256(data).hexdigest()
        assert (f.sha256 != hashlib.sha256(data).hexdigest()) == bool(f.relocate)
    inner = pickle.loads(pickle.loads((dest / "fxgraph/f1/entry").read_bytes())["bundle"][0])
    assert os.path.exists(inner["filename"]) and os.path.normpath(inner["filename"]) == f"{dest}/ab/cabc.py"
    grp = json.loads((dest / "triton/0/K/__grp__k.json").read_text())["child_paths"]
    assert all(os.path.exists(p) for p in grp.values())   # Triton's get_group keeps them (a cache hit)
    assert hydrate_into(lambda: store, dest, [manifest.name]).noop


def test_an_incremental_or_verifying_run_adopts_rewritten_files_without_fetching_them(
        tmp_path: Path, published: tuple[MemoryStore, Manifest, bytes]) -> None:
    store, first, _ = published
    dest = tmp_path / "d" / "fp"
    hydrate_into(lambda: store, dest, [first.name])
    second = publish_build(store, build(tmp_path, "ck-build-2", {"other/x.py": b"x"}), "tiny2")
    assert {f.path for f in second.files} - {f.path for f in first.files} == {"other/x.py"}
    report = hydrate_into(lambda: store, dest, [first.name, second.name])
    # the new file fetched; the rewritten ones (their state hash is not the record's) re-read, not fetched
    assert report.files_fetched == 1 and report.files_verified_local == sum(1 for f in first.files if f.relocate)
    verified = hydrate_into(lambda: store, dest, [first.name, second.name], verify=True)
    assert verified.files_fetched == 0 and verified.files_verified_local == len({f.path for f in
                                                                                 (*first.files, *second.files)})


def test_a_rewritten_file_changed_on_disk_is_fetched_and_rewritten_again(
        tmp_path: Path, published: tuple[MemoryStore, Manifest, bytes]) -> None:
    store, manifest, _ = published
    dest = tmp_path / "d" / "fp"
    hydrate_into(lambda: store, dest, [manifest.name])
    grp = dest / "triton/0/K/__grp__k.json"
    good = grp.read_bytes()
    grp.write_bytes(good.replace(b"k.cubin", b"x.cubin"))
    report = hydrate_into(lambda: store, dest, [manifest.name])
    assert report.files_fetched == 1 and grp.read_bytes() == good


def test_the_node_cache_keeps_published_bytes_and_each_dest_gets_its_own_rewritten_copy(
        tmp_path: Path, published: tuple[MemoryStore, Manifest, bytes]) -> None:
    store, manifest, builder = published
    node = tmp_path / "node"
    dests = [tmp_path / "d1" / "fp", tmp_path / "elsewhere" / "d2" / "fp"]
    for dest in dests:
        hydrate_into(lambda: store, dest, [manifest.name], node_cache=str(node), node_cache_link="hardlink")
        assert names_outside(dest, builder, STEM) == []
        for f in manifest.files:
            links = (dest / f.path).stat().st_nlink
            assert (links == 1) if f.relocate else (links > 1), f.path
    for f in manifest.files:   # content-addressed by the published bytes, whatever dests made of them
        obj = node / "objects" / f.sha256[:2] / f.sha256
        assert hashlib.sha256(obj.read_bytes()).hexdigest() == f.sha256
    a, b = ((d / "triton/0/K/__grp__k.json").read_text() for d in dests)
    assert str(dests[0]) in a and str(dests[1]) in b


def test_a_dest_longer_than_the_build_reserved_is_refused(
        tmp_path: Path, published: tuple[MemoryStore, Manifest, bytes]) -> None:
    store, manifest, _ = published
    dest = tmp_path / ("x" * 200) / "fp"
    with pytest.raises(DestinationError, match=f"reserve {relocate.RESERVED}"):
        hydrate_into(lambda: store, dest, [manifest.name])
    assert not any(p.is_file() and p.read_bytes().startswith(b"\x80") for p in dest.rglob("entry"))

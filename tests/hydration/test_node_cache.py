"""The node cache: one copy per node of every verified blob content, shared by every dest on the node.
Many hydrates fetch each blob from the store once; a dest file never shares a writable inode with it;
every fallback (another filesystem, a full or read-only cache, bytes changed behind our back) is one
line and leaves both the node cache and the dest consistent; a network filesystem is refused."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.errors import DestinationError
from cachekeeper.format.layout import blob_key
from cachekeeper.hydration import nodecache
from cachekeeper.hydration.nodecache import NodeCache
from cachekeeper.stores.file import FileStore

from .helpers import build_tree, hydrate_into, publish_tree, read_tree, write_tree

BLOBS = blob_key("00").rsplit("/", 2)[0] + "/"


class CountingStore(FileStore):
    """Counts the blob bytes every ranged read returns (what the store served), across threads."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.served = 0
        self.lock = threading.Lock()

    def open_range(self, key, start, end, read_timeout, connect_timeout):  # type: ignore[no-untyped-def]
        body = super().open_range(key, start, end, read_timeout, connect_timeout)
        if not key.startswith(BLOBS):
            return body   # a manifest: every hydrate reads those
        chunks = body.chunks

        def counted(size: int):  # type: ignore[no-untyped-def]
            for chunk in chunks(size):
                with self.lock:
                    self.served += len(chunk)
                yield chunk
        body.chunks = counted
        return body


Published = tuple[CountingStore, dict[str, bytes], str]


@pytest.fixture
def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Published:
    files = build_tree(n_small=6, n_blobs=8)
    store = CountingStore(tmp_path / "store")
    m = publish_tree(store, write_tree(tmp_path / "build", files), monkeypatch)
    store.served = 0
    return store, files, m.name


def _via(tmp_path: Path, link: str = "auto", max_bytes: int | None = None) -> dict[str, Any]:
    """The hydrate settings that fill a dest through the node cache at `tmp_path/node`."""
    return {"node_cache": str(tmp_path / "node"), "node_cache_link": link, "node_cache_max_bytes": max_bytes}


def test_a_second_dest_on_the_node_reads_nothing_from_the_store_and_shares_read_only_copies(
        published: Published, tmp_path: Path) -> None:
    store, files, name = published
    first = hydrate_into(lambda: store, tmp_path / "d1", [name], **_via(tmp_path, link="hardlink"))
    served = store.served
    second = hydrate_into(lambda: store, tmp_path / "d2", [name], **_via(tmp_path, link="hardlink"))
    assert read_tree(tmp_path / "d1") == read_tree(tmp_path / "d2") == files
    assert served > 0 and store.served == served          # the second hydrate fetched no blob
    assert first.node_fetched_bytes > 0 and second.node_fetched_bytes == 0
    assert second.node_linked == len(files) and not second.warnings
    for rel in files:
        st = os.lstat(tmp_path / "d2" / rel)
        assert st.st_nlink >= 3 and not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def test_a_symlink_swapped_in_for_a_dest_file_is_replaced_by_the_shared_copy_never_written_through(
        published: Published, tmp_path: Path) -> None:
    store, files, name = published
    dest = tmp_path / "d1"
    hydrate_into(lambda: store, dest, [name], **_via(tmp_path, link="hardlink"))
    rel = sorted(files)[0]
    outside = tmp_path / "outside"
    outside.write_bytes(b"not yours")
    (dest / rel).unlink()
    (dest / rel).symlink_to(outside)
    again = hydrate_into(lambda: store, dest, [name], **_via(tmp_path, link="hardlink"))
    assert outside.read_bytes() == b"not yours"
    st = os.lstat(dest / rel)
    assert stat.S_ISREG(st.st_mode) and st.st_nlink >= 2 and (dest / rel).read_bytes() == files[rel]
    assert again.node_linked == 1 and again.node_fetched_bytes == 0
    assert not [p for p in (dest / rel).parent.iterdir() if p.name.endswith(".ck-tmp")]


def test_concurrent_hydrates_fetch_each_blob_from_the_store_once(
        published: Published, tmp_path: Path) -> None:
    store, files, name = published
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            hydrate_into(lambda: store, tmp_path / f"d{i}", [name], **_via(tmp_path, link="hardlink"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    alone = CountingStore(store.root)
    hydrate_into(lambda: alone, tmp_path / "direct", [name])
    assert store.served == alone.served          # 1x the set, not 4x
    assert all(read_tree(tmp_path / f"d{i}") == files for i in range(4))


def test_as_root_without_reflink_dests_get_copies_and_one_line_says_so(
        published: Published, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, files, name = published
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(nodecache, "_can_reflink", lambda a, b: False)
    report = hydrate_into(lambda: store, tmp_path / "d", [name], **_via(tmp_path))
    assert read_tree(tmp_path / "d") == files and report.node_copied == len(files)
    assert [w for w in report.warnings if "copied into the dest" in w] == report.warnings and len(report.warnings) == 1
    assert all(os.lstat(tmp_path / "d" / rel).st_nlink == 1 for rel in files)   # never the shared inode


def test_a_node_cache_on_another_filesystem_falls_back_to_copies_reported_once(
        published: Published, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, files, name = published
    real_link = os.link

    def link(src: str | os.PathLike[str], dst: str | os.PathLike[str], **kw: object) -> None:
        if "/node/objects/" in os.fspath(src):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_link(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", link)
    report = hydrate_into(lambda: store, tmp_path / "d", [name], **_via(tmp_path, link="hardlink"))
    assert read_tree(tmp_path / "d") == files and report.node_copied == len(files)
    assert len(report.warnings) == 1 and "on another filesystem" in report.warnings[0]


def test_bytes_changed_behind_our_back_are_discarded_and_fetched_again(
        published: Published, tmp_path: Path) -> None:
    store, files, name = published
    hydrate_into(lambda: store, tmp_path / "d1", [name], **_via(tmp_path, link="copy"))
    victim = next(p for p in (tmp_path / "node" / "objects").rglob("*") if p.is_file() and not p.suffix)
    os.chmod(victim, 0o644)
    victim.write_bytes(b"tampered")
    report = hydrate_into(lambda: store, tmp_path / "d2", [name], **_via(tmp_path, link="copy"))
    assert read_tree(tmp_path / "d2") == files
    assert len(report.warnings) == 1 and "changed behind our back" in report.warnings[0]
    assert nodecache.sha256_file(victim) == victim.name     # the node cache holds the right bytes again


def test_a_read_only_node_cache_is_reported_and_the_hydrate_goes_on_without_it(
        published: Published, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, files, name = published
    NodeCache(tmp_path / "node").open()
    real_access = os.access
    node = str(tmp_path / "node")
    monkeypatch.setattr(os, "access", lambda p, m: False if os.fspath(p).startswith(node) and m == os.W_OK
                        else real_access(p, m))
    report = hydrate_into(lambda: store, tmp_path / "d", [name], **_via(tmp_path))
    assert read_tree(tmp_path / "d") == files and report.node_linked == report.node_copied == 0
    assert report.warnings == [f"node cache {tmp_path / 'node'} is read-only; hydrating without it"]


def test_a_full_node_cache_is_reported_and_the_hydrate_goes_on_without_it(
        published: Published, tmp_path: Path) -> None:
    store, files, name = published
    report = hydrate_into(lambda: store, tmp_path / "d", [name], **_via(tmp_path, max_bytes=1000))
    assert read_tree(tmp_path / "d") == files and report.node_fetched_bytes == 0
    assert len(report.warnings) == 1 and "cannot fit" in report.warnings[0]
    assert not [p for p in (tmp_path / "node" / "objects").rglob("*") if p.is_file()]


def test_a_node_cache_on_a_network_filesystem_is_refused(
        published: Published, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, _, name = published
    monkeypatch.setattr(nodecache, "fs_type", lambda p: "nfs4")
    with pytest.raises(DestinationError, match="is on nfs4, a network filesystem; a node cache is per node"):
        hydrate_into(lambda: store, tmp_path / "d", [name], **_via(tmp_path))


def test_deleting_a_dest_keeps_the_shared_copy_and_gc_evicts_only_what_no_dest_links(
        published: Published, tmp_path: Path) -> None:
    import shutil

    store, files, name = published
    hydrate_into(lambda: store, tmp_path / "d1", [name], **_via(tmp_path, link="hardlink"))
    hydrate_into(lambda: store, tmp_path / "d2", [name], **_via(tmp_path, link="hardlink"))
    node = NodeCache(tmp_path / "node")
    size = node.size()
    shutil.rmtree(tmp_path / "d1")
    assert node.size() == size and node.evict(size) == 0          # d2 still links every object
    assert read_tree(tmp_path / "d2") == files
    shutil.rmtree(tmp_path / "d2")
    assert node.evict(size) == size and node.size() == 0


def test_a_node_cache_on_a_full_disk_is_reported_and_the_hydrate_goes_on_without_it(
        published: Published, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, files, name = published
    real = os.statvfs

    class Full:
        def __init__(self, st: os.statvfs_result) -> None:
            self.f_frsize, self.f_bavail = st.f_frsize, 1

    monkeypatch.setattr(os, "statvfs", lambda p: Full(real(p)) if "/node/" in os.fspath(p) + "/" else real(p))
    report = hydrate_into(lambda: store, tmp_path / "d", [name], **_via(tmp_path))
    assert read_tree(tmp_path / "d") == files and report.node_fetched_bytes == 0
    assert len(report.warnings) == 1 and f"node cache {tmp_path / 'node'} is full (0 MiB free" in report.warnings[0]


def test_a_node_cache_that_fills_up_midway_is_reported_and_the_dest_is_still_complete(
        published: Published, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.hydration import fetch

    store, files, name = published

    class NoSpace(fetch.AtomicFile):
        def __init__(self, path: Path, tag: str | None = None, *, writeback: bool = True) -> None:
            if "/node/objects/" in str(path):
                raise DestinationError(f"cannot write to {path.parent}: No space left on device")
            super().__init__(path, tag, writeback=writeback)

    monkeypatch.setattr(fetch, "AtomicFile", NoSpace)
    report = hydrate_into(lambda: store, tmp_path / "d", [name], **_via(tmp_path))
    assert read_tree(tmp_path / "d") == files
    assert len(report.warnings) == 1 and "No space left on device" in report.warnings[0]
    assert not [p for p in (tmp_path / "node" / "objects").rglob("*") if p.is_file()]

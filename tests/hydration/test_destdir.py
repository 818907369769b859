"""A dest's layout (hydration/destdir.py): one dir per toolchain, what `gc --dest` may reclaim, and the
version that keeps another release from misreading it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachekeeper.errors import DestinationError
from cachekeeper.fs.locks import FileLock
from cachekeeper.hydration.destdir import claim_layout, reclaim, reclaimable, served_dir, toolchain_dir
from cachekeeper.publish.upload import publish
from cachekeeper.stores.file import FileStore

from .helpers import fingerprint, hydrate_into, spec, write_tree

FILES = {"a/1.neff": b"one" * 50, "b/2.neff": b"two" * 50}


@pytest.fixture()
def store(tmp_path: Path) -> FileStore:
    store = FileStore(tmp_path / "store", create=True)
    publish(store, fingerprint=fingerprint(), spec=spec(), roots={"cache": write_tree(tmp_path / "build", FILES)},
            include=lambda r, rel, p: True)
    return store


def _name(store: FileStore) -> str:
    [path] = (store.root / "manifests" / fingerprint().id).glob("*.json")
    return path.stem


def test_an_older_release_flat_dest_is_reclaimed_file_by_file_and_foreign_files_are_kept(
        tmp_path: Path, store: FileStore) -> None:
    dest = tmp_path / "dest"
    hydrate_into(lambda: store, dest, [_name(store)])           # layout 1: files straight in the dest
    (dest / "mine.txt").write_text("the operator's own file")
    served = claim_layout(dest, fingerprint("2").id, "fake", lock_timeout=1)
    hydrate_into(lambda: store, served, [_name(store)])
    items = reclaimable(dest)
    assert sorted(i.path.relative_to(dest).as_posix() for i in items) == sorted(FILES)
    assert {i.why for i in items} == {"layout 1"}
    assert len(reclaim(dest, items)) == 2
    assert (dest / "mine.txt").exists() and served.is_dir() and not (dest / "a" / "1.neff").exists()
    assert reclaimable(dest) == []


def test_gc_skips_a_toolchain_dir_that_a_hydrate_holds(tmp_path: Path, store: FileStore) -> None:
    dest = tmp_path / "dest"
    old = claim_layout(dest, fingerprint("1").id, "fake", lock_timeout=1)
    hydrate_into(lambda: store, old, [_name(store)])
    claim_layout(dest, fingerprint("2").id, "fake", lock_timeout=1).mkdir()
    items = reclaimable(dest)
    assert [i.path for i in items] == [old] and items[0].bytes > sum(len(b) for b in FILES.values())  # and its state
    with FileLock(old / ".cachekeeper" / "lock"):
        assert reclaim(dest, items) == [] and old.exists()
    assert [i.path for i in reclaim(dest, items)] == [old] and not old.exists()


def test_a_dest_of_another_layout_version_is_one_line(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    claim_layout(dest, "abc", "fake", lock_timeout=1)
    layout = dest / ".cachekeeper" / "layout.json"
    layout.write_text(json.dumps({**json.loads(layout.read_text()), "v": 3}))
    with pytest.raises(DestinationError, match="dest layout version 3; this release reads version 2"):
        claim_layout(dest, "abc", "fake", lock_timeout=1)


def test_a_dir_of_foreign_files_is_refused_and_capture_resolves_the_current_toolchain(tmp_path: Path) -> None:
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    with pytest.raises(DestinationError, match="did not place"):
        claim_layout(foreign, "abc", "fake", lock_timeout=1)
    dest = tmp_path / "dest"
    fp = fingerprint("3").id
    served = claim_layout(dest, fp, "fake", lock_timeout=1)
    served.mkdir()
    assert served_dir(dest) == served == toolchain_dir(dest, fp) and served_dir(served) == served

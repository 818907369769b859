"""With durability "fsync", files are fsynced and renamed on committer threads, off the download streams.
The durability order must be what docs/durability.md says: each file's data is fsynced before its rename,
each rename and each new directory is made durable by a fsync of its parent, and all of that happens before
the state file (which lets later runs trust a file without reading it) is renamed into place. With
durability "boot" no fsync follows, so nothing asks the disk to write back early either."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from cachekeeper.errors import DestinationError
from cachekeeper.hydration.state import load_state
from cachekeeper.stores.file import FileStore

from .helpers import build_tree, hydrate_into, publish_tree, read_tree, write_tree

Event = tuple[str, str]


@pytest.fixture
def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FileStore, dict[str, bytes], str]:
    files = build_tree(n_small=12, n_blobs=20)
    store = FileStore(tmp_path / "store")
    m = publish_tree(store, write_tree(tmp_path / "build", files), monkeypatch)
    return store, files, m.name


def _record(monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    """(what, path) for every fsync, rename and mkdir, in the order they happened, from any thread."""
    events: list[Event] = []
    lock = threading.Lock()
    real_fsync, real_replace, real_mkdir = os.fsync, os.replace, os.mkdir

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        real_fsync(fd)
        with lock:
            events.append(("fsync", path))

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        with lock:  # recorded before it happens: a fsync seen later is surely after it
            events.append(("rename-from", os.fspath(src)))
            events.append(("rename", os.fspath(dst)))
        real_replace(src, dst)

    def mkdir(path: str | os.PathLike[str], mode: int = 0o777) -> None:
        with lock:
            events.append(("mkdir", os.fspath(path)))
        real_mkdir(path, mode)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "mkdir", mkdir)
    return events


def _synced_between(events: list[Event], path: str, after: int, before: int) -> bool:
    return ("fsync", path) in events[after + 1:before]


def test_each_file_is_durable_before_its_rename_and_everything_before_the_state_file(
        published: tuple[FileStore, dict[str, bytes], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, files, name = published
    dest = tmp_path / "dest"
    events = _record(monkeypatch)
    hydrate_into(lambda: store, dest, [name], durability="fsync")
    assert read_tree(dest) == files

    state = str(dest / ".cachekeeper" / "state.json")
    state_at = max(i for i, e in enumerate(events) if e == ("rename", state))
    placed = [str(dest / rel) for rel in files]
    for target in placed:
        at = max(i for i, e in enumerate(events) if e == ("rename", target))
        tmp = events[at - 1][1]
        assert ("fsync", tmp) in events[:at], f"{target} renamed before its data was fsynced"
        assert _synced_between(events, os.path.dirname(target), at, state_at), \
            f"the rename of {target} was not made durable before the state file"
    made = [(i, path) for i, (what, path) in enumerate(events[:state_at])
            if what == "mkdir" and path.startswith(f"{dest}/") and "/.cachekeeper" not in path]
    assert len(made) >= 12 + 1 + 1  # p/<nn>/ for the packed files, p/, b/
    for i, path in made:
        assert _synced_between(events, os.path.dirname(path), i, state_at), \
            f"new directory {path} is not durable in its parent before the state file"


@pytest.mark.parametrize("durability", ["fsync", "boot"])
def test_a_rename_that_fails_is_one_error_and_the_rest_is_recorded(
        published: tuple[FileStore, dict[str, bytes], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        durability: str) -> None:
    store, files, name = published
    dest = tmp_path / "dest"
    victim = str(dest / "b" / "07.neff")
    real_replace = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if os.fspath(dst) == victim:
            raise PermissionError(13, "Permission denied")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(DestinationError, match=r"cannot place .*07\.neff: Permission denied"):
        hydrate_into(lambda: store, dest, [name], durability=durability)
    state = load_state(dest)
    assert state is not None
    recorded = {k.split("/", 1)[1] for k in state.files}
    assert recorded == set(files) - {"b/07.neff"}
    assert {k: v for k, v in read_tree(dest).items() if k in recorded} == {k: files[k] for k in recorded}
    assert not list(dest.rglob("*.ck-tmp"))  # the failed file's temp is gone, not left for a sweep


class _Arrivals(FileStore):
    """Hands a body over in 64 KiB pieces, as a socket's reads do, not in the reader's whole 1 MiB chunks."""

    def open_range(self, key, start, end, read_timeout, connect_timeout):  # type: ignore[no-untyped-def]
        body = super().open_range(key, start, end, read_timeout, connect_timeout)
        chunks = body.chunks

        def pieces(size: int):  # type: ignore[no-untyped-def]
            for chunk in chunks(size):
                for i in range(0, len(chunk), 64 << 10):
                    yield chunk[i:i + (64 << 10)]
        body.chunks = pieces  # type: ignore[method-assign]
        return body


@pytest.mark.parametrize("parted", [False, True], ids=["one stream", "ranged parts"])
@pytest.mark.parametrize(("durability", "early"), [("fsync", True), ("both", True), ("boot", False)])
def test_only_a_run_that_fsyncs_starts_writeback_while_it_downloads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str, early: bool, parted: bool) -> None:
    """sync_file_range shortens the fsync to come: the whole blob's writeback is started during the download,
    whether it streams whole or as parallel parts (each part starts its own range's, whatever size the
    network's pieces are). With no fsync to come it would only compete with the download for the disk, so
    durability "boot" leaves writeback to the kernel."""
    from cachekeeper.fs import atomic
    from cachekeeper.hydration import fetch

    big = os.urandom(24 << 20)   # three times WRITEBACK_EVERY; three parts of 8 MiB when parted
    files = {"big.neff": big, "p/s.neff": b"small"}
    store = _Arrivals(tmp_path / "store")
    m = publish_tree(store, write_tree(tmp_path / "build", files), monkeypatch)
    monkeypatch.setattr(fetch, "PART", (8 << 20) if parted else 0)
    ranges: list[tuple[int, int]] = []
    monkeypatch.setattr(atomic, "_start_writeback", lambda fd, offset, length: ranges.append((offset, length)))
    hydrate_into(lambda: store, tmp_path / "dest", [m.name], durability=durability)
    assert read_tree(tmp_path / "dest") == files
    started = sorted(ranges)
    if not early:
        assert started == []
    else:   # every byte of the blob, each once, in WRITEBACK_EVERY steps
        assert started == [(off, 8 << 20) for off in range(0, len(big), 8 << 20)]

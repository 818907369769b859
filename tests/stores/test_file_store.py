"""`file://` store: the conformance suite, plus what only a directory tree can show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cachekeeper.errors import StoreNotFound
from cachekeeper.stores import Store, open_store
from cachekeeper.stores.file import FileStore
from cachekeeper.testing.stores import StoreConformance


class TestFileStore(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        return open_store(f"file://{tmp_path / 'store'}")

    def leave_debris(self, store: Store, tmp_path: Path) -> str | None:
        # A real writer killed (SIGKILL) halfway through writing a blob.
        assert isinstance(store, FileStore)
        code = ("import os, sys; from pathlib import Path; from cachekeeper.fs.atomic import atomic_writer\n"
                "with atomic_writer(Path(sys.argv[1])) as f:\n"
                "    f.write(b'partial'); f.flush(); os.kill(os.getpid(), 9)")
        subprocess.run([sys.executable, "-c", code, str(store.root / "blobs/sha256/ab/abcd")], check=False, timeout=60)
        [tmp] = (store.root / "blobs/sha256/ab").iterdir()
        return tmp.relative_to(store.root).as_posix()


def test_a_plain_path_opens_a_file_store(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "s"))
    assert isinstance(store, FileStore)
    assert store.put_bytes("k", b"v") is True
    assert (tmp_path / "s" / "k").read_bytes() == b"v"


def test_opening_a_missing_directory_without_create_is_store_not_found(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFound):
        open_store(f"file://{tmp_path / 'absent'}", create=False)


def test_list_skips_temp_files_a_killed_writer_left(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}")
    store.put_bytes("a/k", b"v")
    (tmp_path / "a" / ".k.123.456.ck-tmp").write_bytes(b"partial")
    assert list(store.list()) == ["a/k"]

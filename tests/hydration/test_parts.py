"""A large blob comes as parallel ranged GETs into one temp file, renamed only when its sha256 matches."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from cachekeeper.errors import HydrateIncomplete, IntegrityError, StoreError
from cachekeeper.format.layout import blob_key
from cachekeeper.hydration import fetch
from cachekeeper.stores.base import Body
from cachekeeper.stores.file import FileStore

from .helpers import hydrate_into, publish_tree, read_tree, write_tree


class RangeLog(FileStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.ranges: list[tuple[str, int, int | None]] = []

    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        self.ranges.append((key, start, end))
        return super().open_range(key, start, end, read_timeout, connect_timeout)


@pytest.fixture()
def big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RangeLog, str, dict[str, bytes]]:
    monkeypatch.setattr(fetch, "PART", 1 << 20)
    files = {"big.bin": os.urandom((5 << 20) + 123), "copy/big.bin": b"", "small.neff": b"s" * 100}
    files["copy/big.bin"] = files["big.bin"]  # one blob, two paths
    store = RangeLog(tmp_path / "store")
    name = publish_tree(store, write_tree(tmp_path / "build", files), monkeypatch, separate_blobs_above=1 << 20).name
    return store, name, files


def test_a_large_blob_arrives_as_parallel_parts_byte_for_byte(
        big: tuple[RangeLog, str, dict[str, bytes]], tmp_path: Path) -> None:
    store, name, files = big
    hydrate_into(lambda: store, tmp_path / "d", [name])
    assert read_tree(tmp_path / "d") == files
    key = blob_key(hashlib.sha256(files["big.bin"]).hexdigest())
    parts = sorted((start, end) for k, start, end in store.ranges if k == key)
    assert parts == [(i << 20, min((i + 1) << 20, len(files["big.bin"]))) for i in range(6)]  # 6 ranged GETs


def test_a_corrupt_large_blob_never_appears(big: tuple[RangeLog, str, dict[str, bytes]], tmp_path: Path) -> None:
    store, name, files = big
    path = store.root / blob_key(hashlib.sha256(files["big.bin"]).hexdigest())
    data = bytearray(path.read_bytes())
    data[3 << 20] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="failed verification"):
        hydrate_into(lambda: store, tmp_path / "d", [name])
    assert not (tmp_path / "d" / "big.bin").exists() and not list((tmp_path / "d").rglob("*.ck-tmp"))


class Shuffled(FileStore):
    """Serves the parts of one blob in a chosen order of completion (a delay per starting offset)."""

    def __init__(self, root: Path, order: list[int], fail: int | None = None) -> None:
        super().__init__(root)
        self.order = order
        self.fail = fail

    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        index = start >> 20
        if end is not None and end - start <= (1 << 20) and index < len(self.order):
            time.sleep(0.04 * self.order.index(index))
            if index == self.fail:
                raise StoreError(f"{key}: part {index} refused")
        return super().open_range(key, start, end, read_timeout, connect_timeout)


@pytest.mark.parametrize("order", [[5, 4, 3, 2, 1, 0], [1, 0, 3, 2, 5, 4], [0, 2, 4, 1, 3, 5]])
def test_parts_ending_in_any_order_are_hashed_in_order(
        big: tuple[RangeLog, str, dict[str, bytes]], tmp_path: Path, order: list[int]) -> None:
    """The hash follows the download (the front of the file as it becomes contiguous), so the order in
    which parts end must not change a byte of the verdict."""
    store, name, files = big
    hydrate_into(lambda: Shuffled(store.root, order), tmp_path / "d", [name])
    assert read_tree(tmp_path / "d") == files


def test_a_part_the_store_refuses_leaves_no_file_and_no_temp(
        big: tuple[RangeLog, str, dict[str, bytes]], tmp_path: Path) -> None:
    store, name, files = big
    with pytest.raises(HydrateIncomplete, match="could not be fetched"):
        hydrate_into(lambda: Shuffled(store.root, [0, 1, 2, 3, 4, 5], fail=2), tmp_path / "d", [name])
    assert not (tmp_path / "d" / "big.bin").exists() and not list((tmp_path / "d").rglob("*.ck-tmp"))
    assert (tmp_path / "d" / "small.neff").read_bytes() == files["small.neff"]


@pytest.mark.parametrize(("part", "window"), [((1 << 20) + 1000, fetch.HASH_WINDOW), (4096 * 3 + 7, 4096 * 2 + 5),
                                              ((1 << 20) + 1000, 3 * 4096)])
def test_parts_not_on_page_boundaries_are_read_back_right(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part: int, window: int) -> None:
    """CACHEKEEPER_PART_MIB may be fractional: a part that starts inside a page is still hashed from
    its own first byte (each read-back window maps from the page below it), window after window."""
    monkeypatch.setattr(fetch, "PART", part)
    monkeypatch.setattr(fetch, "HASH_WINDOW", window)
    files = {"big.bin": os.urandom(5 * part + 321)}
    store = RangeLog(tmp_path / "store")
    name = publish_tree(store, write_tree(tmp_path / "build", files), monkeypatch, separate_blobs_above=1024).name
    hydrate_into(lambda: store, tmp_path / "d", [name])
    assert read_tree(tmp_path / "d") == files
    assert len([k for k, _, _ in store.ranges if k == blob_key(hashlib.sha256(files["big.bin"]).hexdigest())]) == 6


@pytest.mark.parametrize("flip", [0, (1 << 20) - 1, 1 << 20, (5 << 20) + 122])
def test_a_flipped_byte_in_any_part_fails_verification(
        big: tuple[RangeLog, str, dict[str, bytes]], tmp_path: Path, flip: int) -> None:
    """The first byte, the last byte of a part, the first of the next and the blob's last byte: every
    byte of every part is in the hash."""
    store, name, files = big
    path = store.root / blob_key(hashlib.sha256(files["big.bin"]).hexdigest())
    data = bytearray(path.read_bytes())
    data[flip] ^= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="failed verification"):
        hydrate_into(lambda: store, tmp_path / "d", [name])
    assert not (tmp_path / "d" / "big.bin").exists()

"""The read side every store shares (stores/reader.py over Store.open_range): whole objects and ranges
stream in chunks, reads stop at the declared size, and a size the store disagrees with is refused before
any byte of the body is used."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cachekeeper.errors import IntegrityError, ObjectNotFound
from cachekeeper.stores import Store, open_store
from cachekeeper.stores.reader import Deadline, read_bytes, read_into

DATA = os.urandom(3 << 20)   # three read chunks


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.services),
                        pytest.param("gcs", marks=pytest.mark.services)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    param = request.param
    url = f"file://{tmp_path}/store" if param == "file" else request.getfixturevalue(f"{param}_store_url")
    s = open_store(url, create=True)
    s.put_bytes("blobs/x", DATA)
    return s


def _read(store: Store, **kw: object) -> bytes:
    parts: list[bytes] = []
    read_into(store, "blobs/x", parts.append, deadline=Deadline(30), **kw)  # type: ignore[arg-type]
    return b"".join(parts)


def test_whole_objects_and_ranges_stream_in_chunks(store: Store) -> None:
    assert _read(store) == DATA
    assert _read(store, start=1000, length=2 << 20, total=len(DATA)) == DATA[1000:1000 + (2 << 20)]
    assert read_bytes(store, "blobs/x", limit=len(DATA)) == DATA


def test_a_read_stops_at_the_declared_size(store: Store) -> None:
    assert _read(store, start=0, length=10) == DATA[:10]


def test_an_object_whose_size_disagrees_with_its_manifest_is_refused(store: Store) -> None:
    got: list[bytes] = []
    with pytest.raises(IntegrityError, match="its manifest declares 1000"):
        read_into(store, "blobs/x", got.append, start=0, length=1000, total=1000)
    assert got == []
    with pytest.raises(IntegrityError, match="more than the 1024 allowed"):
        read_bytes(store, "blobs/x", limit=1024)


def test_a_missing_key_is_object_not_found(store: Store) -> None:
    with pytest.raises(ObjectNotFound):
        read_into(store, "blobs/nope", lambda b: None, length=5)

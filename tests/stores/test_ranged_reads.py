"""The read side every store shares (stores/reader.py over Store.open_range): whole objects and ranges
stream in chunks, reads stop at the declared size, and a size the store disagrees with is refused before
any byte of the body is used."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

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


@pytest.mark.parametrize(("status", "verdict"), [
    (200, "body"), (206, "body"), (416, "past_end"), (404, "missing"), (401, "denied"), (403, "denied"),
    (429, "retry"), (500, "retry"), (503, "retry"), (400, "error"), (409, "error"), (412, "error"),
])
def test_one_status_classifier_serves_both_http_stores(status: int, verdict: str) -> None:
    from cachekeeper.stores.ranged import classify

    assert classify(status) == verdict


def test_a_range_header_asks_for_exactly_the_bytes_wanted_and_none_for_a_whole_object() -> None:
    from cachekeeper.stores.ranged import range_header

    assert range_header(0, None) == {}
    assert range_header(0, 10) == {"Range": "bytes=0-9"}
    assert range_header(5, None) == {"Range": "bytes=5-"}


class _Ignored:
    """A server that ignored the Range header: the whole object, status 200, in two arrivals."""

    status = 200
    headers: ClassVar[dict[str, str]] = {"Content-Length": "10"}

    def __init__(self) -> None:
        self.parts, self.length_remaining, self.released = [b"0123", b"456789"], 10, False

    def read1(self, amt: int) -> bytes:
        part = self.parts.pop(0) if self.parts else b""
        self.length_remaining -= len(part)
        return part

    def release_conn(self) -> None:
        self.released = True

    def close(self) -> None:
        raise AssertionError("a fully read body keeps its connection")


def test_a_server_that_ignored_the_range_has_the_skipped_prefix_cut_and_its_connection_kept() -> None:
    from cachekeeper.stores.ranged import RangeBody

    resp = _Ignored()
    body = RangeBody(resp, "s3://b/k", skip=6)
    assert b"".join(body.chunks(1 << 20)) == b"6789" and body.total == 10
    body.close()
    assert resp.released

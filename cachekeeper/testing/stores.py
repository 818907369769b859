"""`StoreConformance`: the contract every store passes (stores/base.py), as a pytest suite.

Every store cachekeeper ships runs it (tests/stores/test_*_store.py), and so can a store of your own:
subclass the suite in a test module and provide `store`, a fresh, empty store, as a fixture::

    # tests/test_my_store.py (run with pytest; the suite imports pytest, cachekeeper itself does not)
    import pytest
    from cachekeeper.testing.stores import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            store = MyStore(tmp_path / "root")      # or a bucket/prefix of its own per test
            yield store
            store.close()

`URLStoreConformance` is the same suite for a store that `cachekeeper.stores.open_store` opens from a
URL: name a fixture that yields a fresh URL (`url_fixture = "s3_store_url"`). Knobs a subclass may set:
`streams_downloads` (False only for a store that holds objects in memory anyway), `unvalidated_key_ops`
(known gaps, as strict xfails) and `leave_debris` (what a publisher killed mid-write leaves, for gc; a
store that lists debris but whose writes leave nothing says why in its `debris_note`). Names state the
behaviour; each test checks one promise. The suite writes objects of 20 MiB (`LARGE`), so a test server
needs room for a few.

What docs/stores.md calls optional is tested only where the store has it: a store without its own
`download` is not held to streaming one, and one without `list_debris` lists none. The fault tests
(`FaultConformance`) put the store under test behind a fault-injecting wrapper whose reads raise what an
unwrapped SDK raises (`ConnectionResetError`, `TimeoutError`, `KeyError`, a bare `Exception`) mid-stream,
behind the boundary cachekeeper puts every plugin's store behind (stores/plugin.py), and check that each
read ends in the documented store error, or resumes from the last byte when another attempt cures it.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..errors import ObjectNotFound, StoreError, StoreUnreachable, UnsafePath, describe
from ..stores import Store, open_store
from ..stores.base import Body, ObjectInfo
from ..stores.plugin import PluginStore
from ..stores.reader import Counter, RetryPolicy, read_into

__all__ = ["BINARY", "FAULTS", "LARGE", "DebrisConformance", "FaultConformance", "FaultyStore", "StoreConformance",
           "URLStoreConformance"]

LARGE = 20 << 20  # above the S3/GCS single-request thresholds, so put_file takes the streaming path

BINARY = bytes(range(256)) * 17 + b"\x00\r\n\xff"


class _Recorder:
    """An `out` for download() that remembers each write, to show the download came in pieces."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.writes: list[int] = []

    def write(self, data: bytes) -> int:
        self.h.update(data)
        self.writes.append(len(data))
        return len(data)


def _invalid_key_ops(tmp: Path) -> dict[str, Callable[[Store, str], Any]]:
    src = tmp / "src"
    src.write_bytes(b"x")
    return {
        "put_bytes": lambda s, k: s.put_bytes(k, b"x"),
        "put_file": lambda s, k: s.put_file(k, src),
        "get_bytes": lambda s, k: s.get_bytes(k),
        "get_range": lambda s, k: s.get_range(k, 0, 1),
        "download": lambda s, k: s.download(k, _Recorder()),  # type: ignore[arg-type]
        "size": lambda s, k: s.size(k),
        "exists": lambda s, k: s.exists(k),
        "delete": lambda s, k: s.delete(k),
    }


def _bare(store: Store) -> Store:
    """The store itself, without the boundary a plugin's store is opened behind."""
    return store.inner if isinstance(store, PluginStore) else store


def implements(store: Store, method: str) -> bool:
    """Whether the store has its own `method` (an optional capability), not `Store`'s default."""
    return getattr(type(_bare(store)), method) is not getattr(Store, method)


# What an SDK nobody wrapped raises: the network's two, and two a plugin's own bug lets out.
FAULTS: dict[str, Callable[[], Exception]] = {
    "ConnectionResetError": lambda: ConnectionResetError(104, "Connection reset by peer"),
    "TimeoutError": lambda: TimeoutError("The read operation timed out"),
    "KeyError": lambda: KeyError("x-amz-request-id"),
    "Exception": lambda: Exception("the SDK gave up"),
}
NETWORK = ("ConnectionResetError", "TimeoutError")


class _FaultyBody(Body):
    def __init__(self, inner: Body, faulty: FaultyStore) -> None:
        self.inner, self.faulty, self.total = inner, faulty, inner.total

    def chunks(self, size: int) -> Iterator[bytes]:
        for chunk in self.inner.chunks(size):
            if self.faulty.due():
                yield chunk[:max(1, len(chunk) // 2)]   # some bytes arrive, then the stream fails
                raise self.faulty.fault()
            yield chunk

    def close(self) -> None:
        self.faulty.closed += 1
        self.inner.close()


class _FaultyOut:
    def __init__(self, out: Any, faulty: FaultyStore) -> None:
        self.out, self.faulty = out, faulty

    def write(self, data: bytes) -> int:
        written: int = self.out.write(data)
        if self.faulty.due():   # after the first bytes were delivered: mid-stream
            raise self.faulty.fault()
        return written


class FaultyStore(Store):
    """`inner` whose reads fail mid-stream as an unwrapped SDK's do: a body and a download raise `fault()`
    after some bytes, a listing after its first item, `get_bytes`/`get_range`/`size` at once; the first
    `times` reads only (every read when None). `starts` records each ranged read's offset."""

    def __init__(self, inner: Store, fault: Callable[[], Exception], times: int | None = None) -> None:
        self.inner, self.fault, self.times, self.url = inner, fault, times, inner.url
        self.faults, self.opened, self.closed = 0, 0, 0
        self.starts: list[int] = []
        self._lock = threading.Lock()

    def due(self) -> bool:
        with self._lock:
            if self.times is not None and self.faults >= self.times:
                return False
            self.faults += 1
            return True

    def _fail_now(self) -> None:
        if self.due():
            raise self.fault()

    def put_bytes(self, key: str, data: bytes) -> bool:
        return self.inner.put_bytes(key, data)

    def get_bytes(self, key: str) -> bytes:
        self._fail_now()
        return self.inner.get_bytes(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self._fail_now()
        return self.inner.get_range(key, start, length)

    def download(self, key: str, out: Any) -> int:
        return self.inner.download(key, _FaultyOut(out, self))  # type: ignore[arg-type]

    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        self.starts.append(start)
        body = self.inner.open_range(key, start, end, read_timeout, connect_timeout)
        self.opened += 1
        return _FaultyBody(body, self)

    def size(self, key: str) -> int | None:
        self._fail_now()
        return self.inner.size(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        return (info.key for info in self.list_info(prefix))

    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for i, info in enumerate(self.inner.list_info(prefix)):
            yield info
            if i == 0:
                self._fail_now()

    def delete(self, key: str) -> None:
        self.inner.delete(key)


class FaultConformance:
    """Mixed into StoreConformance: a read that fails as an unwrapped SDK's does, behind the plugin boundary."""

    FAULTED = 96 << 10   # one chunk of every store's body; the fault comes halfway through it

    @pytest.fixture
    def faulted(self, store: Store) -> bytes:
        data = random.Random(41).randbytes(self.FAULTED)
        store.put_bytes("faults/obj", data)
        store.put_bytes("faults/other", b"x")
        return data

    @staticmethod
    def behind_the_boundary(store: Store, fault: str, times: int | None = None) -> tuple[PluginStore, FaultyStore]:
        faulty = FaultyStore(_bare(store), FAULTS[fault], times)
        return PluginStore(faulty, "under-test (conformance)"), faulty

    @staticmethod
    def read(store: Store, data: bytes, counter: Counter) -> bytes:
        parts: list[bytes] = []
        read_into(store, "faults/obj", parts.append, length=len(data), total=len(data), counter=counter,
                  policy=RetryPolicy(attempts=3, base=0.001, cap=0.005))
        return b"".join(parts)

    @pytest.mark.parametrize("fault", NETWORK)
    def test_a_ranged_read_reset_mid_stream_resumes_from_the_last_byte(self, store: Store, faulted: bytes,
                                                                       fault: str) -> None:
        guarded, faulty = self.behind_the_boundary(store, fault, times=1)
        counter = Counter()
        assert self.read(guarded, faulted, counter) == faulted
        assert counter.retries == 1
        assert faulty.starts[0] == 0 and 0 < faulty.starts[1] < len(faulted), faulty.starts  # resumed, not restarted
        assert faulty.closed == faulty.opened == 2, "a body that failed mid-stream was not closed"

    @pytest.mark.parametrize("fault", list(FAULTS))
    def test_a_ranged_read_failing_mid_stream_ends_in_a_store_error_naming_the_plugin(
            self, store: Store, faulted: bytes, fault: str) -> None:
        guarded, faulty = self.behind_the_boundary(store, fault)
        counter = Counter()
        with pytest.raises(StoreError) as info:
            self.read(guarded, faulted, counter)
        message = info.value.message
        assert "store plugin under-test (conformance) failed reading faults/obj" in message and "\n" not in message
        assert describe(FAULTS[fault]()) in message
        if fault in NETWORK:   # another attempt may cure a reset: retried, then given up
            assert counter.retries == 3 and message.endswith("(gave up after 3 attempts)")
        else:                  # a plugin's bug is no network weather: not retried, the original kept
            assert counter.retries == 0 and type(info.value.__cause__) is type(FAULTS[fault]())
        assert faulty.closed == faulty.opened >= 1, "a body that failed mid-stream was not closed"

    @pytest.mark.parametrize("fault", list(FAULTS))
    @pytest.mark.parametrize("op", ["get_bytes", "get_range", "download", "size", "list_info"])
    def test_every_read_failing_outside_the_contract_ends_in_the_documented_store_error(
            self, store: Store, faulted: bytes, fault: str, op: str) -> None:
        guarded, _ = self.behind_the_boundary(store, fault)
        calls: dict[str, Callable[[], object]] = {
            "get_bytes": lambda: guarded.get_bytes("faults/obj"),
            "get_range": lambda: guarded.get_range("faults/obj", 10, 100),
            "download": lambda: guarded.download("faults/obj", _Recorder()),  # type: ignore[arg-type]
            "size": lambda: guarded.size("faults/obj"),
            "list_info": lambda: list(guarded.list_info("faults/")),
        }
        with pytest.raises(StoreError) as info:
            calls[op]()
        error = info.value
        assert not isinstance(error, ObjectNotFound), "a failed read is a failure, never a miss"
        assert "\n" not in error.message
        if not error.message.startswith("store plugin "):
            return   # the store caught it itself (a fault inside its SDK call) and raised a contract class
        # At the boundary: the network's faults are an unreachable store, anything else a store failure.
        assert type(error) is (StoreUnreachable if fault in NETWORK else StoreError)
        assert type(error.__cause__) is type(FAULTS[fault]()), "the original is kept as __cause__"
        assert describe(FAULTS[fault]()) in error.message


class DebrisConformance:
    """Mixed into StoreConformance: batch existence checks, and the debris a killed publisher leaves."""

    def leave_debris(self, store: Store, tmp_path: Path) -> str | None:
        """Leave what a publisher killed mid-write leaves in this store and return its key; None when this
        store's writes leave nothing listable (its `debris_note` then says what expires by itself)."""
        return None

    def test_sizes_answers_many_keys_in_one_call(self, store: Store) -> None:
        for i in range(5):
            store.put_bytes(f"s/{i}", b"x" * i)
        assert store.sizes([f"s/{i}" for i in range(5)] + ["s/missing"]) == {
            **{f"s/{i}": i for i in range(5)}, "s/missing": None}
        assert store.sizes([]) == {}

    def test_a_fresh_store_has_no_debris(self, store: Store) -> None:
        assert list(store.list_debris()) == []

    def test_debris_of_a_killed_publisher_is_listed_apart_from_objects_and_removed(self, store: Store,
                                                                                   tmp_path: Path) -> None:
        key = self.leave_debris(store, tmp_path)
        if key is None and not implements(store, "list_debris"):   # optional (docs/stores.md)
            pytest.skip(f"{type(_bare(store)).__name__} has no debris hooks (optional): gc lists nothing of it")
        if key is None:
            assert store.debris_note, "a store that lists debris, but whose writes leave nothing listable, says why " \
                                      "in `debris_note`"
            pytest.skip(f"{type(_bare(store)).__name__} writes leave nothing listable: {store.debris_note}")
        [item] = list(store.list_debris())
        assert item.key == key and time.time() - 300 < item.mtime <= time.time() + 5
        assert key not in set(store.list()) and key not in {o.key for o in store.list_info()}
        store.delete_debris(item)
        assert list(store.list_debris()) == []
        store.delete_debris(item)   # gone already: not an error


class StoreConformance(DebrisConformance, FaultConformance):
    # The test-only memory store writes a download in one piece; every real store must stream.
    streams_downloads = True
    # Operations a store is known not to validate keys for (a strict xfail: fixing the store fails it).
    unvalidated_key_ops: frozenset[str] = frozenset()

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        raise NotImplementedError("a concrete test class provides a fresh, empty store")

    @pytest.fixture
    def large_file(self, tmp_path: Path) -> Path:
        path = tmp_path / "large.bin"
        path.write_bytes(random.Random(7).randbytes(LARGE))
        return path

    # --- put / get -------------------------------------------------------------------------------

    @pytest.mark.parametrize("data", [b"hello", b"", BINARY], ids=["text", "empty", "binary"])
    def test_put_bytes_then_get_bytes_returns_the_same_bytes(self, store: Store, data: bytes) -> None:
        assert store.put_bytes("blobs/obj", data) is True
        assert store.get_bytes("blobs/obj") == data

    def test_put_file_then_get_bytes_returns_the_file_contents(self, store: Store, tmp_path: Path) -> None:
        src = tmp_path / "f.bin"
        src.write_bytes(BINARY)
        assert store.put_file("blobs/f", src) is True
        assert store.get_bytes("blobs/f") == BINARY

    def test_put_bytes_of_an_existing_key_returns_false_and_keeps_the_first_bytes(self, store: Store) -> None:
        store.put_bytes("k", b"first")
        assert store.put_bytes("k", b"second") is False
        assert store.get_bytes("k") == b"first"

    def test_put_file_of_an_existing_key_returns_false_and_keeps_the_first_bytes(
            self, store: Store, tmp_path: Path) -> None:
        src = tmp_path / "second"
        src.write_bytes(b"second")
        store.put_bytes("k", b"first")
        assert store.put_file("k", src) is False
        assert store.get_bytes("k") == b"first"

    def test_eight_racing_puts_of_one_key_have_one_winner_whose_bytes_are_stored(self, store: Store) -> None:
        payloads = [bytes([i]) * 4096 for i in range(8)]
        results: list[bool | BaseException] = [False] * 8
        barrier = threading.Barrier(8)

        def writer(i: int) -> None:
            barrier.wait()
            try:
                results[i] = store.put_bytes("race/key", payloads[i])
            except BaseException as exc:  # surfaced by the assertion below, not lost in the thread
                results[i] = exc

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(isinstance(r, bool) for r in results), results
        assert results.count(True) == 1
        assert store.get_bytes("race/key") == payloads[results.index(True)]

    @pytest.mark.parametrize("read", ["get_bytes", "get_range", "download"])
    def test_reading_a_missing_key_raises_object_not_found(self, store: Store, read: str) -> None:
        calls: dict[str, Callable[[], object]] = {
            "get_bytes": lambda: store.get_bytes("no/such"),
            "get_range": lambda: store.get_range("no/such", 0, 10),
            "download": lambda: store.download("no/such", _Recorder()),  # type: ignore[arg-type]
        }
        with pytest.raises(ObjectNotFound) as info:
            calls[read]()
        assert info.value.key == "no/such", "the missing key travels as a field (callers never cut messages)"

    # --- ranges ----------------------------------------------------------------------------------

    def test_get_range_returns_bytes_from_the_middle(self, store: Store) -> None:
        store.put_bytes("r", b"0123456789")
        assert store.get_range("r", 2, 5) == b"23456"

    def test_get_range_at_the_tail_returns_only_the_remaining_bytes(self, store: Store) -> None:
        store.put_bytes("r", b"0123456789")
        assert store.get_range("r", 7, 100) == b"789"

    def test_get_range_past_the_end_returns_nothing(self, store: Store) -> None:
        store.put_bytes("r", b"0123456789")
        assert store.get_range("r", 10, 5) == b""
        assert store.get_range("r", 50, 5) == b""

    def test_get_range_of_an_empty_object_returns_nothing(self, store: Store) -> None:
        store.put_bytes("empty", b"")
        assert store.get_range("empty", 0, 10) == b""

    # --- large objects ---------------------------------------------------------------------------

    def test_a_large_file_round_trips_through_put_file_and_a_streamed_download(
            self, store: Store, large_file: Path) -> None:
        data = large_file.read_bytes()
        assert store.put_file("big/obj", large_file) is True
        assert store.size("big/obj") == LARGE
        out = _Recorder()
        assert store.download("big/obj", out) == LARGE  # type: ignore[arg-type]
        assert out.h.hexdigest() == hashlib.sha256(data).hexdigest()
        if self.streams_downloads and implements(store, "download"):   # optional (docs/stores.md)
            assert max(out.writes) < LARGE, "download wrote the object in one piece: it did not stream"
        mid = (8 << 20) - 100  # straddles the 8 MiB boundary of chunked transfers
        assert store.get_range("big/obj", mid, 300) == data[mid:mid + 300]

    def test_put_file_of_an_existing_large_key_returns_false_and_keeps_the_first_bytes(
            self, store: Store, large_file: Path) -> None:
        store.put_bytes("big/obj", b"first")
        assert store.put_file("big/obj", large_file) is False
        assert store.get_bytes("big/obj") == b"first"

    # --- size / exists / list / delete -----------------------------------------------------------

    def test_size_and_exists_describe_stored_and_missing_keys(self, store: Store) -> None:
        store.put_bytes("a/b", b"12345")
        store.put_bytes("a/empty", b"")
        assert store.size("a/b") == 5
        assert store.size("a/empty") == 0
        assert store.size("a/missing") is None
        assert store.exists("a/b") is True
        assert store.exists("a/missing") is False

    def test_list_returns_the_keys_under_a_plain_string_prefix(self, store: Store) -> None:
        keys = ["m/fp1/e1.json", "m/fp1/e2.json", "m/fp2/e1.json", "m/x", "mx/y", "top"]
        for k in keys:
            store.put_bytes(k, b"")
        assert sorted(store.list()) == sorted(keys)
        assert sorted(store.list("m/")) == ["m/fp1/e1.json", "m/fp1/e2.json", "m/fp2/e1.json", "m/x"]
        assert sorted(store.list("m/fp1/")) == ["m/fp1/e1.json", "m/fp1/e2.json"]
        assert sorted(store.list("m/fp1/e1")) == ["m/fp1/e1.json"]
        assert sorted(store.list("m")) == sorted(k for k in keys if k.startswith("m"))
        assert list(store.list("nothing/")) == []

    def test_list_info_gives_each_key_its_size_and_a_current_mtime(self, store: Store) -> None:
        before = time.time()
        store.put_bytes("i/a", b"12345")
        store.put_bytes("i/b/c", b"")
        store.put_bytes("j/x", b"1")
        info = {o.key: o for o in store.list_info("i/")}
        assert set(info) == {"i/a", "i/b/c"} == set(store.list("i/"))
        assert (info["i/a"].size, info["i/b/c"].size) == (5, 0)
        # Servers run on this host: their clocks are ours, give or take a second and their rounding.
        assert all(before - 5 <= o.mtime <= time.time() + 5 for o in info.values())

    def test_list_of_an_empty_store_is_empty(self, store: Store) -> None:
        assert list(store.list()) == []

    def test_delete_removes_the_key_and_a_second_delete_is_not_an_error(self, store: Store) -> None:
        store.put_bytes("d/k", b"x")
        store.delete("d/k")
        assert store.exists("d/k") is False
        assert list(store.list("d/")) == []
        store.delete("d/k")
        store.delete("d/never-existed")

    def test_a_deleted_key_can_be_put_again(self, store: Store) -> None:
        store.put_bytes("d/k", b"old")
        store.delete("d/k")
        assert store.put_bytes("d/k", b"new") is True
        assert store.get_bytes("d/k") == b"new"

    def test_keys_with_spaces_plus_signs_and_unicode_round_trip_and_list_unchanged(self, store: Store) -> None:
        keys = ["odd/a b+c=d&e", "odd/ünï-😀", "odd/%2F~!@$"]
        for i, k in enumerate(keys):
            assert store.put_bytes(k, bytes([i])) is True
        assert [store.get_bytes(k) for k in keys] == [b"\x00", b"\x01", b"\x02"]
        assert sorted(store.list("odd/")) == sorted(keys)

    def test_check_passes_on_a_usable_store(self, store: Store) -> None:
        store.check()

    # --- hostile keys ----------------------------------------------------------------------------

    @pytest.mark.parametrize("key", ["../x", "a/../../x", "/abs", "a//b", "a/./b", "a\x00b", "a\\b", ""],
                             ids=["dotdot", "nested-dotdot", "absolute", "double-slash", "dot", "nul",
                                  "backslash", "empty"])
    @pytest.mark.parametrize("op", ["put_bytes", "put_file", "get_bytes", "get_range", "download", "size",
                                    "exists", "delete"])
    def test_invalid_keys_are_rejected_with_unsafe_path(self, store: Store, tmp_path: Path, op: str, key: str,
                                                        request: pytest.FixtureRequest) -> None:
        if op in self.unvalidated_key_ops:
            request.applymarker(pytest.mark.xfail(strict=True, reason=f"{type(store).__name__}.{op} "
                                                  "does not call check_key yet"))
        with pytest.raises(UnsafePath) as info:
            _invalid_key_ops(tmp_path)[op](store, key)
        assert info.value.key == key


class URLStoreConformance(StoreConformance):
    """The suite for a store opened from a URL fixture (named by `url_fixture`), closed after each test."""

    url_fixture: str

    @pytest.fixture
    def store(self, request: pytest.FixtureRequest) -> Iterator[Store]:
        store = open_store(request.getfixturevalue(self.url_fixture))
        yield store
        store.close()


"""The storage contract every store implements (file, memory, s3, gcs), and what a store plugin imports.

Objects are immutable: `put` never replaces an existing key (S3 `IfNoneMatch='*'`, GCS
`if_generation_match=0`, exclusive create locally) and says whether it wrote. Keys are POSIX-style
relative paths validated by `check_key`. Stores raise only `cachekeeper.errors` classes, so the CLI can
print one line; `cachekeeper.testing.stores.StoreConformance` is the suite every store passes.

A store is reached from a URL by its scheme: a distribution registers an object under the entry-point group
`cachekeeper.stores` (its name is the scheme), either its `Store` subclass, which parses its URLs
(`parse_url`) and opens one (`open_url`), or a `LazyStore` naming that class when its module imports a
heavy SDK. `__all__` is the whole contract a store plugin needs (docs/stores.md); nothing else of
cachekeeper is promised to stay where it is.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from ..errors import (
    ObjectNotFound,
    StoreAuthError,
    StoreError,
    StoreNotFound,
    StoreRetryable,
    StoreUnreachable,
    StoreWriteDenied,
    UnsafePath,
    UsageError,
)
from ..format.layout import MANIFESTS
from ..fs.paths import safe_relpath
from .url import StoreURL, location_url

# The store plugin contract (docs/stores.md): a plugin imports these names from here, and only these.
__all__ = [
    "Body", "BytesBody", "Debris", "LazyStore", "ObjectInfo", "ObjectNotFound", "Store", "StoreAuthError",
    "StoreError", "StoreNotFound", "StoreRetryable", "StoreURL", "StoreUnreachable", "StoreWriteDenied", "UnsafePath",
    "UsageError", "check_key", "location_url",
]


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    mtime: float      # seconds since the epoch, as the store reports it (GC's grace window reads it)


@dataclass(frozen=True)
class Debris:
    """What a killed publisher can leave behind that no listing of objects shows: a temp file (file
    store) or an unfinished multipart upload (S3, billed until aborted). GC removes it after its grace."""

    key: str
    kind: Literal["temp", "multipart"]
    mtime: float      # when it was started
    size: int = 0
    upload_id: str = ""


class Body:
    """One attempt's response: `total` is the object's whole size when the store said it."""

    total: int | None = None

    def chunks(self, size: int) -> Iterator[bytes]:
        raise NotImplementedError

    def close(self) -> None:
        """Release the connection (a half-read body must not go back to a pool)."""


class BytesBody(Body):
    def __init__(self, data: bytes, total: int | None) -> None:
        self.data = data
        self.total = total

    def chunks(self, size: int) -> Iterator[bytes]:
        view = memoryview(self.data)
        for i in range(0, len(view), size):
            yield bytes(view[i:i + size])


def check_key(key: str) -> str:
    try:
        safe_relpath(key)
    except UnsafePath:
        raise UnsafePath(f"invalid object key {key!r}", key=key) from None
    return key


class Store(abc.ABC):
    """An immutable object store. Implementations must be safe to call from several threads."""

    url: str

    # --- reached from a URL (the `cachekeeper.stores` entry point names the class) ------------------

    @classmethod
    def parse_url(cls, url: str, base: str | Path | None = None) -> StoreURL:
        """Check a URL of this store's scheme and give its canonical form; raise `UsageError` (its `url`
        set) when it is malformed. `base`: what a relative local path is relative to (the cwd, or the
        config's directory). The default reads `scheme://location/prefix` with a location required."""
        return location_url(url)

    @classmethod
    def open_url(cls, where: StoreURL, *, create: bool = True) -> Store:
        """Open the store `where` (`parse_url`'s result) names. `create`: a writer may create what is
        missing (a directory); a reader passes False and gets `StoreNotFound` instead."""
        raise UsageError(f"store class {cls.__module__}.{cls.__qualname__} cannot be opened from a URL",
                         "a store registered under a URL scheme defines the classmethod open_url")

    @abc.abstractmethod
    def put_bytes(self, key: str, data: bytes) -> bool:
        """Create `key` holding `data`; False (and no write) if the key already exists."""

    def put_file(self, key: str, path: Path) -> bool:
        """Create `key` from a local file; stores override this to stream large files."""
        return self.put_bytes(key, path.read_bytes())

    @abc.abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Whole object; `ObjectNotFound` if missing."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes from offset `start` (fewer only at the end of the object)."""

    def download(self, key: str, out: BinaryIO) -> int:
        """Stream the object into `out`; returns the byte count. Stores override to stream."""
        data = self.get_bytes(key)
        out.write(data)
        return len(data)

    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        """One attempt at bytes [start, end) (to the end of the object when `end` is None), streamed.

        The read side's one primitive (`stores/reader.py` retries and resumes around it): no retries
        of its own; a failure another attempt may cure raises `StoreRetryable`. This default reads
        through `get_range`, whole; the network stores override it to stream with their timeouts.
        """
        if end is None:
            data = self.get_bytes(key)
            return BytesBody(data[start:], len(data))
        return BytesBody(self.get_range(key, start, end - start), None)

    @abc.abstractmethod
    def size(self, key: str) -> int | None:
        """Size in bytes, or None if the key does not exist."""

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def sizes(self, keys: Iterable[str], *, threads: int = 16) -> dict[str, int | None]:
        """`size` of many keys at once (None: missing). Parallel requests; local stores override."""
        wanted = sorted(set(keys))
        if len(wanted) <= 1:
            return {k: self.size(k) for k in wanted}
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(threads, len(wanted)), thread_name_prefix="ck-head") as pool:
            return dict(zip(wanted, pool.map(self.size, wanted), strict=True))

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys starting with `prefix` (a plain string prefix), in no promised order."""

    @abc.abstractmethod
    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Like `list`, with each object's size and modification time (one listing, no per-key calls)."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove `key`; a missing key is not an error (GC may race another GC)."""

    # What killed publishers leave behind (GC). Stores whose writes leave nothing keep the defaults.

    debris_note: str = ""   # what the store cleans up by itself, for `gc` to say
    # what a writing host (a capturing server) must be granted, in the store's own terms
    write_permission: str = ("give this host's user write access to the store directory (blobs/, signatures/, "
                             "manifests/)")

    def list_debris(self) -> Iterator[Debris]:
        """Temp objects and unfinished uploads under this store's prefix, in no promised order."""
        return iter(())

    def delete_debris(self, item: Debris) -> None:  # noqa: B027 - optional hook
        """Remove (or abort) one piece of debris; gone already is not an error."""

    def check(self) -> None:
        """Raise a StoreError subclass if the store is unusable (missing bucket, bad credentials)."""
        next(iter(self.list(MANIFESTS)), None)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and pools."""


class OnDemand:
    """One store for a block of work that opens it late, often, or not at all: `get()` opens it on
    the first call and hands out the same one after, so its SDK client (~0.1 s to build) and pooled
    connections serve every step; leaving the block closes it."""

    def __init__(self, open_it: Callable[[], Store]) -> None:
        self._open_it = open_it
        self._store: Store | None = None
        self._closed = False
        self._lock = threading.Lock()   # steps may run on a deadline's worker thread

    def get(self) -> Store:
        with self._lock:
            if self._store is not None:
                return self._store
        # Opened outside the lock: an open a deadline gave up on never holds the block's exit.
        store = self._open_it()
        with self._lock:
            if self._store is None and not self._closed:
                self._store = store
                return store
            kept = self._store
        store.close()   # another thread's open won, or the block has ended: this one is not kept
        return kept if kept is not None else store

    def __enter__(self) -> Callable[[], Store]:
        return self.get

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            store, self._store, self._closed = self._store, None, True
        if store is not None:
            store.close()


class LazyStore:
    """What a `cachekeeper.stores` entry point names for a store whose module imports a heavy SDK: it
    parses URLs by the default rule (`Store.parse_url`) without importing `target` ("module:Class", a
    Store subclass), and imports it only to open a store, so `file://` users never load the SDK."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __repr__(self) -> str:
        return f"LazyStore({self.target!r})"

    def parse_url(self, url: str, base: str | Path | None = None) -> StoreURL:
        return location_url(url)

    def open_url(self, where: StoreURL, *, create: bool = True) -> Store:
        import importlib

        module, _, name = self.target.partition(":")
        store_class = getattr(importlib.import_module(module), name)
        store: Store = store_class.open_url(where, create=create)
        return store

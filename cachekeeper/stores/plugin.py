"""The store contract held at a plugin's boundary: a store plugin's failures reach cachekeeper as store errors.

A store raises only `cachekeeper.errors` classes (stores/base.py). A plugin over an SDK nobody wrapped lets
other exceptions out: a `ConnectionResetError` mid-read, a `KeyError` from its settings. `PluginStore`
stands between such a store and the rest of cachekeeper: whatever any of its methods raises outside the
contract (errors.outside_contract), and whatever the iterators and bodies they return raise while they are
read, becomes one store error naming the plugin, with the original as `__cause__`:

* `StoreRetryable` for a `ConnectionError` or `TimeoutError` of a ranged read (`open_range` and its body):
  the resumable reader retries it, as it does a store's own (stores/reader.py);
* `StoreUnreachable` for one from any other method;
* `StoreError` for anything else (`KeyError`, a bare `Exception`): a failure, never a miss.

So `--best-effort` softens it like any other store failure, and every command prints it in one line.
Only plugins are wrapped (stores/schemes.py): cachekeeper's own stores translate their SDKs' errors
themselves, and a bug of ours keeps its traceback. The proxy adds one Python call per store call and per
chunk of a body (chunks are a MiB): nothing a hydrate can measure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

from ..errors import StoreError, StoreRetryable, StoreUnreachable, describe, outside_contract
from .base import Body, Debris, ObjectInfo, Store

T = TypeVar("T")
_NETWORK = (ConnectionError, TimeoutError)


class PluginStore(Store):
    """`inner`, a plugin's store, with every failure outside the contract turned into a store error naming
    `origin` (`dir2 (ck_dir2:Dir2Store from ck-dir2)`: the scheme, its entry point and its distribution)."""

    def __init__(self, inner: Store, origin: str) -> None:
        self.inner, self.origin = inner, origin
        self.url = str(getattr(inner, "url", ""))

    def __repr__(self) -> str:
        return f"PluginStore({self.inner!r}, {self.origin!r})"

    # --- the translation ---------------------------------------------------------------------------

    def error(self, exc: BaseException, doing: str, key: str | None = None, *, read: bool = False) -> StoreError:
        """The store error `exc` (raised by the plugin while `doing`) becomes."""
        return translate(exc, self.origin, doing, key=key, url=self.url or None, read=read)

    def _call(self, doing: str, key: str | None, fn: Callable[[], T], *, read: bool = False) -> T:
        try:
            return fn()
        except Exception as exc:
            if not outside_contract(exc):
                raise
            raise self.error(exc, doing, key, read=read) from exc

    def _items(self, doing: str, items: Iterable[T]) -> Iterator[T]:
        try:
            yield from items
        except Exception as exc:
            if not outside_contract(exc):
                raise
            raise self.error(exc, doing) from exc

    # --- the contract, delegated -------------------------------------------------------------------

    @property
    def debris_note(self) -> str:  # type: ignore[override]
        return self.inner.debris_note

    @property
    def write_permission(self) -> str:  # type: ignore[override]
        return self.inner.write_permission

    def put_bytes(self, key: str, data: bytes) -> bool:
        return self._call(f"writing {key}", key, lambda: self.inner.put_bytes(key, data))

    def put_file(self, key: str, path: Path) -> bool:
        return self._call(f"writing {key}", key, lambda: self.inner.put_file(key, path))

    def get_bytes(self, key: str) -> bytes:
        return self._call(f"reading {key}", key, lambda: self.inner.get_bytes(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call(f"reading {key}", key, lambda: self.inner.get_range(key, start, length))

    def download(self, key: str, out: BinaryIO) -> int:
        sink = _Sink(out)
        try:
            return self._call(f"reading {key}", key, lambda: self.inner.download(key, sink))  # type: ignore[arg-type]
        except BaseException:
            if sink.error is not None:   # our own writer failed (a full disk): its error, not the plugin's
                raise sink.error from None
            raise

    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        body = self._call(f"reading {key}", key, lambda: self.inner.open_range(key, start, end, read_timeout,
                                                                               connect_timeout), read=True)
        return _PluginBody(body, self, key)

    def size(self, key: str) -> int | None:
        return self._call(f"reading the size of {key}", key, lambda: self.inner.size(key))

    def exists(self, key: str) -> bool:
        return self._call(f"reading the size of {key}", key, lambda: self.inner.exists(key))

    def sizes(self, keys: Iterable[str], *, threads: int = 16) -> dict[str, int | None]:
        return self._call("reading object sizes", None, lambda: self.inner.sizes(keys, threads=threads))

    def list(self, prefix: str = "") -> Iterator[str]:
        doing = f"listing {prefix or 'the store'}"
        return self._items(doing, self._call(doing, None, lambda: self.inner.list(prefix)))

    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        doing = f"listing {prefix or 'the store'}"
        return self._items(doing, self._call(doing, None, lambda: self.inner.list_info(prefix)))

    def delete(self, key: str) -> None:
        self._call(f"deleting {key}", key, lambda: self.inner.delete(key))

    def list_debris(self) -> Iterator[Debris]:
        return self._items("listing debris", self._call("listing debris", None, self.inner.list_debris))

    def delete_debris(self, item: Debris) -> None:
        self._call(f"removing debris {item.key}", item.key, lambda: self.inner.delete_debris(item))

    def check(self) -> None:
        self._call("checking the store", None, self.inner.check)

    def close(self) -> None:
        self._call("closing the store", None, self.inner.close)


def translate(exc: BaseException, origin: str, doing: str, *, key: str | None = None, url: str | None = None,
              read: bool = False) -> StoreError:
    """The one-line store error for `exc`, which the store plugin `origin` raised while `doing`; `read`: in a
    ranged read, where a reset or a timeout is worth another attempt."""
    network = isinstance(exc, _NETWORK)
    cls = (StoreRetryable if read else StoreUnreachable) if network else StoreError
    hint = (f"the store plugin raised {type(exc).__name__}, which the store contract does not allow "
            "(docs/stores.md): check the store and the plugin's settings, and report it to the plugin's maintainers")
    return cls(f"store plugin {origin} failed {doing}: {describe(exc)}", hint, key=key, url=url)


class _PluginBody(Body):
    """A plugin's response body: its reads fail as the store's do."""

    def __init__(self, inner: Body, store: PluginStore, key: str) -> None:
        self.inner, self.store, self.key = inner, store, key
        self.total = store._call(f"reading {key}", key, lambda: inner.total, read=True)

    def chunks(self, size: int) -> Iterator[bytes]:
        try:
            yield from self.inner.chunks(size)
        except Exception as exc:
            if not outside_contract(exc):
                raise
            raise self.store.error(exc, f"reading {self.key}", self.key, read=True) from exc

    def close(self) -> None:
        self.store._call(f"closing a read of {self.key}", self.key, self.inner.close)


class _Sink:
    """The `out` a plugin's download writes to: remembers a failure of our own writer, so it is never taken
    for the plugin's."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.error: BaseException | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.out.write(data)
        except BaseException as exc:
            self.error = exc
            raise

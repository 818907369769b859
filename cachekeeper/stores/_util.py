"""Plumbing the cloud stores share. Imports nothing heavy: `file://` users load it too cheaply to notice."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import ClassVar, Generic, NoReturn, Protocol, TypeVar

from ..errors import ObjectNotFound, StoreNotFound
from .url import StoreURL


def bucket_location(scheme: str, bucket: str, prefix: str) -> tuple[str, str]:
    """The prefix without its slashes and the store's URL, for `scheme://bucket/prefix`."""
    if not bucket:
        raise StoreNotFound(f"{scheme}:// URL names no bucket", f"use {scheme}://bucket/prefix", url=f"{scheme}://")
    where = StoreURL(scheme, bucket, prefix.strip("/"))
    return where.path, str(where)


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class ClientSlot(Generic[C]):
    """A store's one SDK client: built on first use, once, under a lock (building one is not
    thread-safe, using one is); close() closes it, and the next use builds a fresh one."""

    def __init__(self) -> None:
        self._client: C | None = None
        self._lock = threading.Lock()

    def get(self, make: Callable[[], C], errors: Callable[[], AbstractContextManager[object]]) -> C:
        """The client, built by `make` inside `errors()` (the store's error translation) if there is none."""
        client = self._client
        if client is None:
            with self._lock:
                client = self._client
                if client is None:
                    with errors():
                        client = self._client = make()
        return client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


class BucketPlumbing:
    """What the bucket stores (s3://, gs://) share: their URL and prefix, and a 404's verdict, which needs
    one look at the bucket (a bare 404 does not say whether the key or the bucket is missing)."""

    def __init__(self, scheme: str, bucket: str, prefix: str) -> None:
        self.prefix, self.url = bucket_location(scheme, bucket, prefix)
        self.bucket_name = bucket
        self._bucket_seen = False

    _sdk_errors: ClassVar[tuple[type[BaseException], ...]] = ()   # what the store's SDK raises

    @contextlib.contextmanager
    def _errors(self, key: str | None = None) -> Iterator[None]:
        """Translate the SDK's failures into cachekeeper errors naming the URL (`_raise`)."""
        try:
            yield
        except self._sdk_errors as exc:
            self._raise(exc, key)

    def _raise(self, exc: BaseException, key: str | None = None) -> NoReturn:
        raise NotImplementedError

    def _bucket_exists(self) -> bool:
        """Asked once per store and remembered (`_bucket_seen`)."""
        raise NotImplementedError

    def _where(self, key: str | None) -> str:
        return f"{self.url}/{key}" if key else self.url

    def _not_found(self) -> StoreNotFound:
        return StoreNotFound(f"bucket {self.bucket_name!r} does not exist ({self.url})", url=self.url)

    def _missing(self, key: str) -> NoReturn:
        with self._errors(key):
            exists = self._bucket_exists()
        if not exists:
            raise self._not_found()
        raise ObjectNotFound(f"{self._where(key)} not found", key=key, url=self.url)

"""Plumbing the cloud stores share. Imports nothing heavy: `file://` users load it too cheaply to notice."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

from ..errors import StoreNotFound
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

"""In-memory store for tests of planning and publishing logic (never used by the CLI)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

from ..errors import ObjectNotFound
from .base import ObjectInfo, Store, check_key


class MemoryStore(Store):
    def __init__(self) -> None:
        self.url = "memory://"
        self.objects: dict[str, bytes] = {}
        self.mtimes: dict[str, float] = {}
        self._lock = threading.Lock()

    def put_bytes(self, key: str, data: bytes) -> bool:
        with self._lock:
            if check_key(key) in self.objects:
                return False
            self.objects[key] = bytes(data)
            self.mtimes[key] = time.time()
            return True

    def get_bytes(self, key: str) -> bytes:
        try:
            return self.objects[check_key(key)]
        except KeyError:
            raise ObjectNotFound(f"memory://{key} not found", key=key, url=self.url) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self.get_bytes(key)[start:start + length]

    def size(self, key: str) -> int | None:
        data = self.objects.get(check_key(key))
        return None if data is None else len(data)

    def list(self, prefix: str = "") -> Iterator[str]:
        return iter([k for k in list(self.objects) if k.startswith(prefix)])

    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return iter([ObjectInfo(k, len(v), self.mtimes.get(k, 0.0)) for k, v in list(self.objects.items())
                     if k.startswith(prefix)])

    def sizes(self, keys: Iterable[str], *, threads: int = 16) -> dict[str, int | None]:
        return {k: self.size(k) for k in set(keys)}

    # A write is one dict assignment under a lock: a killed process leaves nothing, not even the store.
    debris_note = "memory: writes are atomic in-process; nothing outlives the process"

    def delete(self, key: str) -> None:
        with self._lock:
            self.objects.pop(check_key(key), None)
            self.mtimes.pop(key, None)

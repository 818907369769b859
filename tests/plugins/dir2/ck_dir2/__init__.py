"""`dir2://volume/prefix`: objects as files under `$CK_DIR2_ROOT/volume/prefix`.

A store plugin with only what docs/stores.md requires: no `download`, `open_range`, debris hooks or
`debris_note`. Like a store over an SDK that nobody wrapped, it lets plain exceptions out:
`CK_DIR2_FAULT=method:ExceptionName[:times]` makes `method` raise `ExceptionName` (a builtin) the first
`times` calls of each process (every call when not given). Without `CK_DIR2_ROOT`, `open_url` raises a
plain KeyError, as a plugin reading its settings carelessly does.
"""

from __future__ import annotations

import builtins
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from cachekeeper.stores.base import ObjectInfo, ObjectNotFound, Store, StoreNotFound, StoreURL, check_key

_calls: dict[str, int] = {}
_lock = threading.Lock()


def _fault(method: str) -> None:
    spec = os.environ.get("CK_DIR2_FAULT", "")
    if not spec:
        return
    name, _, rest = spec.partition(":")
    kind, _, times = rest.partition(":")
    if name != method:
        return
    with _lock:
        _calls[method] = n = _calls.get(method, 0) + 1
    if not times or n <= int(times):
        raise getattr(builtins, kind)(f"dir2 fault injected in {method}")


class Dir2Store(Store):
    @classmethod
    def open_url(cls, where: StoreURL, *, create: bool = True) -> Dir2Store:
        _fault("open_url")
        return cls(Path(os.environ["CK_DIR2_ROOT"]) / where.bucket / where.path, str(where), create=create)

    def __init__(self, root: Path, url: str, *, create: bool = True) -> None:
        self.root, self.url = root, url
        if create:
            root.mkdir(parents=True, exist_ok=True)
        elif not root.is_dir():
            raise StoreNotFound(f"{url} does not exist ({root})", url=url)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put_bytes(self, key: str, data: bytes) -> bool:
        _fault("put_bytes")
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(dest, "xb") as f:   # exclusive: of racing writers, one creates
                f.write(data)
        except FileExistsError:
            return False
        return True

    def get_bytes(self, key: str) -> bytes:
        _fault("get_bytes")
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.url}/{key} not found", key=key, url=self.url) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        _fault("get_range")
        try:
            with self._path(key).open("rb") as f:
                f.seek(start)
                return f.read(length)
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.url}/{key} not found", key=key, url=self.url) from None

    def size(self, key: str) -> int | None:
        _fault("size")
        path = self._path(key)
        return path.stat().st_size if path.is_file() else None

    def list(self, prefix: str = "") -> Iterator[str]:
        for info in self.list_info(prefix):
            yield info.key

    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        _fault("list_info")
        for top, _, files in os.walk(self.root):
            for name in files:
                path = Path(top, name)
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    stat = path.stat()
                    yield ObjectInfo(key, stat.st_size, stat.st_mtime)

    def delete(self, key: str) -> None:
        _fault("delete")
        self._path(key).unlink(missing_ok=True)

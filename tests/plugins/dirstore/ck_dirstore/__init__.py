"""`dirstore://volume/prefix`: objects as files under `$CK_DIRSTORE_ROOT/volume/prefix`.

An example store plugin. It imports only the names the store contract documents (cachekeeper.stores.base,
docs/stores.md), and its package registers the scheme in the `cachekeeper.stores` entry-point group.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from cachekeeper.stores.base import ObjectInfo, ObjectNotFound, Store, StoreNotFound, StoreURL, check_key

CHUNK = 1 << 20
TEMP = ".incoming"   # where a write is staged before it is linked into place


class DirStore(Store):
    debris_note = "dirstore: a write killed mid-way leaves a file under .incoming/, which no listing shows"

    @classmethod
    def open_url(cls, where: StoreURL, *, create: bool = True) -> DirStore:
        return cls(Path(os.environ["CK_DIRSTORE_ROOT"]) / where.bucket / where.path, str(where), create=create)

    def __init__(self, root: Path, url: str, *, create: bool = True) -> None:
        self.root, self.url = root, url
        if create:
            (root / TEMP).mkdir(parents=True, exist_ok=True)
        elif not root.is_dir():
            raise StoreNotFound(f"{url} does not exist ({root})", url=url)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put_bytes(self, key: str, data: bytes) -> bool:
        dest = self._path(key)
        staged = self.root / TEMP / uuid.uuid4().hex
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_bytes(data)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.link(staged, dest)   # atomic and exclusive: of racing writers, one links
        except FileExistsError:
            return False
        finally:
            staged.unlink()
        return True

    def put_file(self, key: str, path: Path) -> bool:
        return self.put_bytes(key, path.read_bytes())

    def _open(self, key: str) -> BinaryIO:
        try:
            return self._path(key).open("rb")
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.url}/{key} not found", key=key, url=self.url) from None

    def get_bytes(self, key: str) -> bytes:
        with self._open(key) as f:
            return f.read()

    def get_range(self, key: str, start: int, length: int) -> bytes:
        with self._open(key) as f:
            f.seek(start)
            return f.read(length)

    def download(self, key: str, out: BinaryIO) -> int:
        total = 0
        with self._open(key) as f:
            while chunk := f.read(CHUNK):
                out.write(chunk)
                total += len(chunk)
        return total

    def size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            return None

    def list(self, prefix: str = "") -> Iterator[str]:
        return (info.key for info in self.list_info(prefix))

    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        found = []
        for top, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if not (top == str(self.root) and d == TEMP)]
            for name in files:
                path = Path(top, name)
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    stat = path.stat()
                    found.append(ObjectInfo(key, stat.st_size, stat.st_mtime))
        return iter(found)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

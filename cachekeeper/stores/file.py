"""`file://` store: a directory tree, the embedded default. Exclusive create via link(2).

Registered as the scheme `file` (pyproject's `cachekeeper.stores` entry points); a plain path means it too."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import (
    DestinationError,
    IntegrityError,
    ObjectNotFound,
    StoreError,
    StoreNotFound,
    StoreWriteDenied,
    UsageError,
)
from ..format.layout import TEMP_SUFFIX
from ..fs.atomic import atomic_writer
from ..fs.paths import CHUNK, NotRegular, open_regular
from .base import Body, Debris, ObjectInfo, Store, check_key
from .url import StoreURL, local_path, split_url


def _open_object(path: Path, url: str, key: str) -> BinaryIO:
    """An object for reading: a regular file only. A FIFO, device or directory planted in the store
    (anyone with filesystem access to it can) would block or never end a read: it is a corrupt object."""
    try:
        return open_regular(path, follow=True)
    except FileNotFoundError:
        raise ObjectNotFound(f"{url}/{key} not found", key=key, url=url) from None
    except NotRegular:
        raise IntegrityError(f"{url}/{key} is not a regular file", key=key, url=url) from None
    except OSError as exc:
        raise StoreError(f"{url}/{key}: {exc.strerror}", key=key, url=url) from None


class _FileBody(Body):
    """Streams a slice of a local file; its size is the file's (so a wrong declared size is caught)."""

    def __init__(self, f: BinaryIO, start: int, end: int | None) -> None:
        self.f = f
        self.total = os.fstat(f.fileno()).st_size
        self.pos = start
        self.end = self.total if end is None else min(end, self.total)

    def chunks(self, size: int) -> Iterator[bytes]:
        self.f.seek(self.pos)
        while self.pos < self.end:
            chunk = self.f.read(min(size, self.end - self.pos))
            if not chunk:
                return
            self.pos += len(chunk)
            yield chunk

    def close(self) -> None:
        self.f.close()


_REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS)


class FileStore(Store):
    @classmethod
    def parse_url(cls, url: str, base: str | Path | None = None) -> StoreURL:
        """`file:///abs/dir`, `file://rel/dir` or a plain path; relative to `base` (default the cwd)."""
        rest = split_url(url)[1]
        if not rest:
            raise UsageError(f"store {url!r} names no directory", "use file:///path or a plain path", url=url)
        return StoreURL("file", "", local_path(rest, base))

    @classmethod
    def open_url(cls, where: StoreURL, *, create: bool = True) -> FileStore:
        return cls(Path(where.path), create=create)

    def __init__(self, root: Path, *, create: bool = True) -> None:
        self.root = root.absolute()
        self.url = f"file://{self.root}"
        if create:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                if exc.errno in _REFUSED:
                    raise StoreWriteDenied(f"{self.url}: write refused: cannot create the store directory "
                                           f"({exc.strerror}); this host's user lacks write permission on "
                                           f"{_writable_parent(self.root)}", url=self.url,
                                           path=str(self.root)) from None
                raise StoreError(f"cannot create store directory {self.root}: {exc.strerror}", url=self.url,
                                 path=str(self.root)) from None
        elif not self.root.is_dir():
            raise StoreNotFound(f"store directory {self.root} does not exist", url=self.url, path=str(self.root))

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    @contextlib.contextmanager
    def _writing(self, key: str) -> Iterator[None]:
        """A write the store refuses is a store error (exit 3) naming the permission, never a
        "destination" error: the store is not hydrate's dest."""
        try:
            yield
        except (DestinationError, OSError) as exc:
            if isinstance(exc, FileExistsError):
                raise
            target = self._path(key).parent
            where = _writable_parent(target)
            if not os.access(where, os.W_OK):
                raise StoreWriteDenied(f"{self.url}/{key}: write refused: this host's user lacks write permission "
                                       f"on {where}", key=key, url=self.url, path=str(where)) from None
            why = exc.message if isinstance(exc, DestinationError) else exc.strerror
            raise StoreError(f"{self.url}/{key}: write failed: {why}", key=key, url=self.url) from None

    def put_bytes(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        try:
            with self._writing(key), atomic_writer(path, exclusive=True) as f:
                f.write(data)
        except FileExistsError:
            return False
        return True

    def put_file(self, key: str, path: Path) -> bool:
        dest = self._path(key)
        if dest.exists():
            return False
        try:
            with self._writing(key), atomic_writer(dest, exclusive=True) as out, open(path, "rb") as src:
                shutil.copyfileobj(src, out, CHUNK)
        except FileExistsError:
            return False
        return True

    def get_bytes(self, key: str) -> bytes:
        with _open_object(self._path(key), self.url, key) as f:
            return f.read()

    def get_range(self, key: str, start: int, length: int) -> bytes:
        with _open_object(self._path(key), self.url, key) as f:
            f.seek(start)
            return f.read(length)

    def download(self, key: str, out: BinaryIO) -> int:
        with _open_object(self._path(key), self.url, key) as f:
            n = 0
            while chunk := f.read(CHUNK):
                out.write(chunk)
                n += len(chunk)
            return n

    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        return _FileBody(_open_object(self._path(key), self.url, key), start, end)

    def size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            return None

    def list(self, prefix: str = "") -> Iterator[str]:
        # Walk only the directory the prefix names, so listing manifests/<fp>/ stays cheap.
        base, _, _ = prefix.rpartition("/")
        start = self.root / base if base else self.root
        if not start.is_dir():
            return
        for dirpath, _dirs, files in os.walk(start):
            rel_dir = os.path.relpath(dirpath, self.root)
            for name in files:
                if name.endswith(TEMP_SUFFIX):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if key.startswith(prefix):
                    yield key

    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for key in self.list(prefix):
            try:
                st = (self.root / key).stat()
            except FileNotFoundError:  # deleted by a concurrent GC between listing and stat
                continue
            yield ObjectInfo(key, st.st_size, st.st_mtime)

    def delete(self, key: str) -> None:
        with self._writing(key), contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def sizes(self, keys: Iterable[str], *, threads: int = 16) -> dict[str, int | None]:
        return {k: self.size(k) for k in set(keys)}   # a stat is cheaper than a thread hop

    def list_debris(self) -> Iterator[Debris]:
        # The temp files of atomic_writer (`.<name>.<pid>.<ns>.ck-tmp`), which `list` never shows.
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if not name.endswith(TEMP_SUFFIX):
                    continue
                path = Path(dirpath, name)
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                yield Debris(path.relative_to(self.root).as_posix(), "temp", st.st_mtime, st.st_size)

    def delete_debris(self, item: Debris) -> None:
        if not item.key.endswith(TEMP_SUFFIX):
            raise StoreError(f"{self.url}/{item.key} is not a temp file; refusing to delete it as debris",
                             key=item.key, url=self.url)
        with self._writing(item.key), contextlib.suppress(FileNotFoundError):
            self._path(item.key).unlink()

    def check(self) -> None:
        if not self.root.is_dir():
            raise StoreNotFound(f"store directory {self.root} does not exist", url=self.url, path=str(self.root))


def _writable_parent(path: Path) -> Path:
    """The deepest existing directory at or above `path`: the one whose permission decides a write."""
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return path

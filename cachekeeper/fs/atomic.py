"""The one way cachekeeper writes files: temp file in the same directory, fsync, rename.

Readers never see a partial file, and a kill -9 at any point leaves at most a stray `*.ck-tmp` file that
`fs.locks.sweep_temp` removes later. Paths that come from manifests go through `fs.paths.safe_join` first.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import DestinationError, IntegrityError
from .paths import ensure_dir, temp_path


def fsync_dir(path: str | Path) -> None:
    """Make a directory's entries (a rename, a new child) durable; best effort where unsupported."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


WRITEBACK_EVERY = 8 << 20


def _sync_file_range() -> Callable[[int, int, int], object] | None:
    """Linux's sync_file_range(2): start writing a file's dirty pages back now, without waiting."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sync_file_range
        fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
        return lambda fd, off, n: fn(fd, off, n, 2)  # SYNC_FILE_RANGE_WRITE
    except (OSError, AttributeError):
        return None


_UNSET: object = object()
_writeback: object = _UNSET   # resolved on first use: ctypes stays off the no-op hydrate's imports


def _start_writeback(fd: int, offset: int, length: int) -> None:
    global _writeback
    if _writeback is _UNSET:
        _writeback = _sync_file_range()
    if _writeback is not None:
        _writeback(fd, offset, length)  # type: ignore[operator]


class _Stream:
    """Sequential writes into an AtomicFile from `pos` on, starting the writeback of its own range every
    WRITEBACK_EVERY bytes when the file asks for it: one per file (`AtomicFile.write`), or one per ranged
    part writing its slice of a large blob (`AtomicFile.stream`), whatever size the network's chunks are."""

    def __init__(self, file: AtomicFile, pos: int) -> None:
        self.file = file
        self.pos = self.flushed = pos

    def write(self, data: bytes | memoryview) -> None:
        self.file.pwrite(data, self.pos)
        self.pos += len(data)
        if self.file.writeback and self.pos - self.flushed >= WRITEBACK_EVERY:
            _start_writeback(self.file.f.fileno(), self.flushed, self.pos - self.flushed)
            self.flushed = self.pos


class AtomicFile:
    """A temp file beside `path` that becomes `path` on `commit()`; `abort()` (or a crash) leaves only
    a temp file a later sweep removes. Every OS failure is a one-line DestinationError.

    With `writeback` (for a writer that will fsync), every stream of a large file starts its writeback
    every WRITEBACK_EVERY bytes (sync_file_range, `_Stream`). The fsync in `commit` then finds little left
    to flush, so durability costs overlap the download instead of following it. Without an fsync to come
    there is nothing to shorten: early writeback would only put the disk's queue in the download's way
    (sync_file_range waits for room in it), so the kernel writes the pages back in its own time."""

    def __init__(self, path: Path, tag: str | None = None, *, writeback: bool = True) -> None:
        self.path = path
        self.tmp = temp_path(path, tag)
        self.writeback = writeback
        try:
            self.f: BinaryIO = open(self.tmp, "xb", buffering=0)  # noqa: SIM115 - closed by commit/abort
        except OSError as exc:
            raise DestinationError(f"cannot write to {path.parent}: {exc.strerror}", path=str(path)) from None
        self._sequential = _Stream(self, 0)

    def pwrite(self, data: bytes | memoryview, offset: int) -> None:
        """Write at `offset`; no writeback of its own (a `_Stream` starts it for the range it writes)."""
        try:
            view = memoryview(data)
            while view:   # a short write is possible
                n = os.pwrite(self.f.fileno(), view, offset)
                view, offset = view[n:], offset + n
        except OSError as exc:
            raise DestinationError(f"cannot write {self.path}: {exc.strerror}", path=str(self.path)) from None

    def stream(self, offset: int) -> _Stream:
        """A sequential writer from `offset` on: one per ranged part of a large blob (parallel, each its own
        slice of the file)."""
        return _Stream(self, offset)

    def write(self, data: bytes | memoryview) -> None:
        """Append (the file written front to back by one writer); a failure discards the temp file."""
        try:
            self._sequential.write(data)
        except DestinationError:
            self.abort()
            raise

    def commit(self, *, fsync: bool) -> os.stat_result:
        """Rename into place (atomically replacing a file or a symlink there, never following it);
        with `fsync`, the data is on disk first. Returns the placed file's lstat."""
        try:
            self.f.flush()
            if fsync:
                os.fsync(self.f.fileno())
            self.f.close()
            os.replace(self.tmp, self.path)
            return os.lstat(self.path)
        except OSError as exc:
            self.abort()
            raise DestinationError(f"cannot place {self.path}: {exc.strerror}", path=str(self.path)) from None

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self.f.close()
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


@contextlib.contextmanager
def atomic_writer(path: Path, *, exclusive: bool = False, durable: bool = True,
                  tag: str | None = None) -> Iterator[BinaryIO]:
    """Yield a file that becomes `path` only if the block finishes without raising.

    `exclusive=True` refuses to replace an existing file (immutable objects): it raises FileExistsError.
    """
    ensure_dir(path.parent)
    tmp = temp_path(path, tag)
    try:
        f = open(tmp, "xb")  # noqa: SIM115 - closed below, before the rename
    except OSError as exc:
        raise DestinationError(f"cannot write to {path.parent}: {exc.strerror}", path=str(path)) from None
    try:
        with f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        if exclusive:
            # link() fails if the name exists: an exclusive, atomic publish.
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path, data: bytes, *, expected_sha256: str | None = None,
                       exclusive: bool = False, durable: bool = True) -> None:
    """Write `data` to `path` atomically, after checking it against `expected_sha256` if given."""
    if expected_sha256 is not None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected_sha256:
            raise IntegrityError(f"{path.name}: sha256 {actual[:12]}… != expected {expected_sha256[:12]}…")
    with atomic_writer(path, exclusive=exclusive, durable=durable) as f:
        f.write(data)

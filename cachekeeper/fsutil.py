"""The one way cachekeeper writes files: temp file in the same directory, fsync, rename.

Readers never see a partial file, and a kill -9 at any point leaves at most a stray `*.ck-tmp` file that
`sweep_temp` removes later. Paths that come from manifests go through `safe_join` first.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from .errors import DestinationError, IntegrityError, LockBusy, UnsafePath

TMP_SUFFIX = ".ck-tmp"
CHUNK = 1 << 20


def safe_relpath(rel: str) -> PurePosixPath:
    """Validate a manifest/archive path: relative, POSIX, no `..`, no NUL, no backslash, not empty."""
    if not rel or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        raise UnsafePath(f"unsafe path in manifest: {rel!r}")
    parts = rel.split("/")  # split by hand: PurePosixPath would quietly drop "." and "//"
    if any(p in ("", ".", "..") for p in parts) or ":" in parts[0]:
        raise UnsafePath(f"unsafe path in manifest: {rel!r}")
    return PurePosixPath(*parts)


def safe_join(root: Path, rel: str) -> Path:
    """`root / rel`, refusing anything that could land outside `root`, also through a symlinked parent."""
    target = root / safe_relpath(rel)
    real_root = os.path.realpath(root)
    real_parent = os.path.realpath(target.parent)
    if real_parent != real_root and not real_parent.startswith(real_root + os.sep):
        raise UnsafePath(f"path escapes {root}: {rel!r}")
    return target


def ensure_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DestinationError(f"cannot create directory {path}: {exc.strerror}") from None


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: Path, *, exclusive: bool = False, durable: bool = True) -> Iterator[BinaryIO]:
    """Yield a file that becomes `path` only if the block finishes without raising.

    `exclusive=True` refuses to replace an existing file (immutable objects): it raises FileExistsError.
    """
    ensure_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}{TMP_SUFFIX}")
    try:
        f = open(tmp, "xb")  # noqa: SIM115 - closed below, before the rename
    except OSError as exc:
        raise DestinationError(f"cannot write to {path.parent}: {exc.strerror}") from None
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
            _fsync_dir(path.parent)
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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sweep_temp(root: Path) -> int:
    """Remove temp files a killed writer left under `root`; returns how many."""
    n = 0
    if not root.exists():
        return 0
    for p in root.rglob(f"*{TMP_SUFFIX}"):
        with contextlib.suppress(OSError):
            p.unlink()
            n += 1
    return n


class FileLock:
    """An exclusive `flock` on `path`; released by the kernel if the holder dies (no stale locks)."""

    def __init__(self, path: Path, timeout: float = 600.0) -> None:
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None

    def __enter__(self) -> FileLock:
        ensure_dir(self.path.parent)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DestinationError(f"cannot create lock {self.path}: {exc.strerror}") from None
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise LockBusy(f"{self.path} is locked by another process") from None
                time.sleep(0.05)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

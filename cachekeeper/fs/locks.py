"""Locks on the local disk: `FileLock` (one holder of a path; the kernel drops it if the holder dies) and
`LiveTag` (a run's writer tag held under flock, so `sweep_temp` by another run leaves its temp files be)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path

from ..errors import DestinationError, LockBusy
from .paths import TMP_SUFFIX, ensure_dir, temp_tag


class LiveTag:
    """Holds `<live>/<tag>.lock` under flock while a run writes temp files tagged `tag`: a sweep by
    another process sees the lock held and leaves those files alone; the kernel drops it on kill -9."""

    def __init__(self, live: Path, tag: str) -> None:
        self.path = live / f"{tag}.lock"
        self._fd: int | None = None

    def __enter__(self) -> LiveTag:
        ensure_dir(self.path.parent)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise DestinationError(f"cannot create {self.path}: {exc.strerror}", path=str(self.path)) from None
        fcntl.flock(fd, fcntl.LOCK_EX)  # a fresh random name: nobody else holds it
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(self._fd)
            self._fd = None


def _writer_alive(tag: str, live: Path | None) -> bool:
    if tag.isdigit():  # the default tag: a pid (a reused pid only delays a sweep)
        try:
            os.kill(int(tag), 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True
    if live is None:
        return False
    lock = live / f"{tag}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False  # no lock file: its writer finished or died and was swept
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a lock we just took
    with contextlib.suppress(OSError):
        os.unlink(lock)
    return False


def sweep_temp(root: Path, live: Path | None = None, own: str | None = None) -> int:
    """Remove temp files killed writers left under `root`; returns how many.

    A root several runs share (a per-host header dir) passes `live`, the directory of `LiveTag` locks:
    a temp file whose writer still holds its lock (or whose pid tag is a live process) is left alone,
    so one run's sweep never deletes another's in-flight file. `own`: this run's tag, never swept.
    """
    n = 0
    if not root.exists():
        return 0
    verdicts: dict[str, bool] = {}
    found = (Path(d) / f for d, _, files in os.walk(root) for f in files if f.endswith(TMP_SUFFIX))
    for p in found:  # os.walk skips directories removed under it: other runs share this tree
        tag = temp_tag(p.name)
        if tag is not None and live is not None:
            if tag == own:
                continue
            if tag not in verdicts:
                verdicts[tag] = _writer_alive(tag, live)
            if verdicts[tag]:
                continue
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
            raise DestinationError(f"cannot create lock {self.path}: {exc.strerror}", path=str(self.path)) from None
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
                    raise LockBusy(f"{self.path} is locked by another process", path=str(self.path)) from None
                time.sleep(0.05)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

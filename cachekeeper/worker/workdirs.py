"""Build workdirs (`ck-build-*`): each holds a flock for as long as its worker lives, so the next worker
to start on the host removes the dirs of dead workers (kill -9 leaves ~65 MB per entry otherwise).

The kernel drops a flock when its holder dies, whatever killed it: a workdir whose lock can be taken
belongs to nobody. A dir without a lock file is a creation in progress, or older than this scheme; it is
swept only once it is older than `NEW_GRACE_S`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PREFIX = "ck-build-"
LOCK_NAME = ".ck-owner.lock"
NEW_GRACE_S = 300.0


@contextlib.contextmanager
def workdir(root: Path | None) -> Iterator[Path]:
    """A fresh workdir under `root` (default: the temp dir), locked while the block runs, then removed."""
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))
    fd = os.open(path / LOCK_NAME, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def sweep_stale(root: Path | None, *, now: float | None = None) -> list[Path]:
    """Remove the workdirs under `root` that no live worker holds; returns them."""
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    swept: list[Path] = []
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(PREFIX) and p.is_dir() and not p.is_symlink()]
    except OSError:
        return swept
    at = time.time() if now is None else now
    for path in candidates:
        if _abandoned(path, at):
            shutil.rmtree(path, ignore_errors=True)
            swept.append(path)
    return swept


def _abandoned(path: Path, now: float) -> bool:
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            return now - path.stat().st_mtime > NEW_GRACE_S
        except OSError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False            # a live worker holds it
    finally:
        os.close(fd)            # closing drops our own lock again
    return True

"""`python -m tests.harness.keep_builds KEEP ARGS...`: the `cachekeeper` CLI with ARGS, except that each build's
workdir is copied to `KEEP/<its name>` before the worker removes it (its roots as the build left them, before
`include` chose what to publish, and its result.json). The shared prebuild (tests/harness/tiny.py) runs the
real `cachekeeper prebuild` through it, so the tests of the build itself read the same compile the other
modules hydrate, instead of compiling the same entry again.

The only change is to `cachekeeper.worker.prebuild.workdir` (tests/harness/test_keep_builds.py checks that it
is still what the worker builds in): the worker, the build command, publish and the catalog run as they do
for users.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from cachekeeper.worker import prebuild, workdirs


def keeping(keep: Path) -> None:
    """Make the worker copy each build's workdir to `keep/<its name>` before removing it (the names are unique,
    so builds in parallel slots never collide)."""
    made = workdirs.workdir

    @contextlib.contextmanager
    def workdir(root: Path | None) -> Iterator[Path]:
        with made(root) as path:
            try:
                yield path
            finally:
                shutil.copytree(path, keep / path.name, symlinks=True,
                                ignore=shutil.ignore_patterns(workdirs.LOCK_NAME))

    prebuild.workdir = workdir   # type: ignore[assignment]


if __name__ == "__main__":
    keeping(Path(sys.argv[1]))
    sys.argv[1:2] = []
    from cachekeeper.cli import main

    main()

"""`python -m cachekeeper.runtime.replay MODULE ARG...` (or `SCRIPT.py ARG...`): run a build module (`python -m
MODULE ARG...`) or a serving script with strict mode on from its first line, as the canary replays a matrix
entry's warm-up.

`cachekeeper.runtime` is imported first, so CACHEKEEPER_STRICT (the canary sets `fail`) installs its hooks
into torch before the build module compiles anything: the warm-up then runs exactly as the build ran it, and
a compile it would make is refused (Inductor) or reported right after it (the device runtimes). The build's
own directories exist first (Inductor fixes its precompiled-header dir from TMPDIR when it is imported).
"""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
from pathlib import Path

DIR_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TMPDIR")


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m cachekeeper.runtime.replay MODULE|SCRIPT.py ARG...")
    for var in DIR_VARS:   # what the build module's own prepare step does, before torch is imported
        if os.environ.get(var):
            Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
    tempfile.tempdir = None
    import cachekeeper.runtime  # noqa: F401  (strict mode from CACHEKEEPER_STRICT, hooks installed)

    target, *rest = argv
    sys.argv = [target, *rest]
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])

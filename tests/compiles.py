"""What the tests that compile for real (torch and Inductor, through the CLI) share: a command that must
succeed, cachekeeper's warning lines, and the hydrated instance a module prebuilds once.

Not a test module: tests/test_inductor_loop.py, tests/backends/test_inductor_aot.py, tests/pipeline/ and the
shared prebuild (tests/harness/tiny.py) import it, so none of them imports another test module (and its
fixtures and marks) for a helper.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cachekeeper.backends.inductor import aot

TIMEOUT = 1800   # a cold compile of the tiny model on 2 busy cores, with room: a hang still ends


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command that must succeed without a traceback (its stderr's tail is the failure message)."""
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
    return proc


def warnings(stderr: str) -> list[str]:
    """The warning lines cachekeeper.runtime logged in a serving process."""
    return [line for line in stderr.splitlines() if line.startswith("cachekeeper: warning:")]


@dataclass(frozen=True)
class Instance:
    """A fresh instance hydrated from an aot prebuild."""

    tmp: Path
    model: Path
    dest: Path          # the hydrated TORCHINDUCTOR_CACHE_DIR
    env: dict[str, str]  # the serving process's env (its own TMPDIR, with the restored header)

    @property
    def entry(self) -> Path:
        (one,) = (self.dest / aot.AOT_DIR).iterdir()
        return one

    def copy(self, name: str) -> Path:
        dest = self.tmp / "copies" / name
        shutil.copytree(self.dest, dest, ignore=shutil.ignore_patterns("locks", ".cachekeeper"))
        return dest

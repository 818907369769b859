"""`doctor --device-check` whatever a backend does: one `error:` line naming what failed, a hint that fits the
device check (never prebuild's `--only KEY`), a documented exit code, never a traceback.

The backend is a plugin written here (CACHEKEEPER_BACKENDS) whose build does what BAD_BUILD says: crash, exit 0
without its result file, or write a result without counters; with BAD_BUILD unset its `build_command` lets a
KeyError out. `--model` names a dir of our own, so no tiny model is built (torch absent, the other way the
check fails before its build: tests/test_readme_install.py, in a venv without torch).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_env import REPO, one_error_line

BACKEND = '''
import os, sys
from cachekeeper.backends.base import Backend, BuildCommand, Fingerprint

BUILDS = {"crash": "import sys; sys.exit('compiler: out of memory')", "silent": "pass",
          "no-counters": "import sys, json; open(sys.argv[1], 'w').write(json.dumps({'stats': {}}))"}


class BadBackend(Backend):
    name = "bad"
    env_var = "BAD_CACHE_DIR"

    def fingerprint(self, options):
        return Fingerprint.of(self.name, {"toolchain": "1"})

    def unavailable_reason(self, options=None):
        return None

    def build_command(self, job):
        code = BUILDS[os.environ["BAD_BUILD"]]   # unset: a KeyError nobody wrapped
        return BuildCommand([sys.executable, "-c", code, job.result_path], dict(os.environ))
'''
HINT = ("hint: the device check's own build failed, not a prebuild entry: fix what the error names on this host "
        "(`cachekeeper doctor` shows the backend), then run `cachekeeper doctor --device-check` again")


def check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "ck_bad_backend.py").write_text(BACKEND)
    (tmp_path / "model").mkdir(exist_ok=True)
    variables = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": f"{tmp_path}:{REPO}",
                 "CACHEKEEPER_HOME": str(tmp_path / "home"), "CACHEKEEPER_BACKENDS": "bad=ck_bad_backend:BadBackend",
                 **env}
    proc = subprocess.run([sys.executable, "-m", "cachekeeper", "doctor", "--device-check", "--backend", "bad",
                           "--model", str(tmp_path / "model")], capture_output=True, text=True, env=variables,
                          cwd=tmp_path, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.mark.parametrize(("build", "error"), [
    ("crash", "error: device check: the build failed (exit 1): compiler: out of memory"),
    ("silent", "error: device check: the build exited 0 but wrote no result file (TMP/prebuild.json); its build "
               "module writes the job's result_path"),
    ("no-counters", "error: device check: the build's result file TMP/prebuild.json holds no `counters` (the "
                    "runtime's compile and load counts the check judges by)"),
], ids=["crash", "silent", "no-counters"])
def test_a_check_build_that_fails_is_one_line_exit_7_with_the_device_checks_hint(
        tmp_path: Path, build: str, error: str) -> None:
    proc = check(tmp_path, BAD_BUILD=build)
    assert proc.returncode == 7
    assert re.sub(r"/\S*/ck-device-check-[^/]+", "TMP", one_error_line(proc)) == error
    assert proc.stderr.splitlines()[-1] == HINT and "--only" not in proc.stderr


def test_a_plugins_stray_exception_in_build_command_is_one_backend_error_line(tmp_path: Path) -> None:
    proc = check(tmp_path)
    assert proc.returncode == 6
    assert one_error_line(proc) == ("error: bad: the backend plugin (ck_bad_backend:BadBackend) failed in "
                                    "build_command(): KeyError: 'BAD_BUILD'")

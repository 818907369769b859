"""The `cachekeeper` command run for real in a subprocess, on the fake backend (tests/fakes.py: a real
subprocess build that writes files, no torch): a temp world with a config, and the one-`error:`-line check.

Not a test module: the CLI tests (tests/test_cli_*.py, tests/test_hints_truth.py, tests/inspect,
tests/worker, and tests/capture through `run_cli`) import it instead of importing each other.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.fakes import ENABLE, fake_config

REPO = Path(__file__).resolve().parents[1]


def config_text(model_dir: Path, **extra: str) -> str:
    return fake_config(model_dir, build=extra.get("build", ""))


class Env:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.model = tmp / "model"
        self.model.mkdir()
        self.config = tmp / "ck.yaml"
        self.config.write_text(config_text(self.model))
        self.shared = tmp / "shared-dest"
        self.vars = {**os.environ, **ENABLE, "CACHEKEEPER_HOME": str(tmp / "home"),
                     "FAKE_SHARED_DIR": str(self.shared), "PYTHONPATH": str(REPO)}
        self.vars.pop("CACHEKEEPER_STORE", None)
        self.vars.pop("CACHEKEEPER_CATALOG", None)

    def run(self, *args: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        return run_cli(args, {**self.vars, **env}, self.tmp, ok=ok)


def run_cli(args: Sequence[str], env: dict[str, str], cwd: Path, *, ok: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`cachekeeper ARGS` in a subprocess: never a traceback; with `ok`, exit 0."""
    proc = subprocess.run([sys.executable, "-m", "cachekeeper", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr
    return errors[0]

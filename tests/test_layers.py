"""The layers hold (pyproject's [tool.importlinter] contracts, drawn in docs/architecture.md), and each
contract fails when its rule is broken: a contract that cannot fail would guard nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"

# One import per contract that the contract must refuse: (file, the line appended to it, the contract).
VIOLATIONS = [
    ("stores/memory.py", "from ..cli import hints", "the CLI is above the library"),
    ("hydration/state.py", "from ..catalog import db", "the boot path never imports the build side"),
    ("stores/url.py", "from ..backends import toolchain", "stores import neither the catalog nor the backends"),
    ("format/canonical.py", "from ..stores import base", "format modules import nothing above them"),
    ("stores/base.py", "from . import reader", "the store contract imports no store and not the read side"),
]


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(root), "PATH": "", "COLUMNS": "400"}  # wide: one line per contract
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_every_layer_contract_is_kept() -> None:
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout and proc.stdout.count(" KEPT") == len(VIOLATIONS)


def test_each_contract_catches_an_import_that_breaks_it(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "cachekeeper", tmp_path / "cachekeeper", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for path, line, _ in VIOLATIONS:
        with (tmp_path / "cachekeeper" / path).open("a") as f:
            f.write(f"\n{line}  # noqa\n")
    proc = lint(tmp_path)
    assert proc.returncode != 0
    broken = [line for line in proc.stdout.splitlines() if " BROKEN" in line]
    assert len(broken) == len(VIOLATIONS)
    for _, _, contract in VIOLATIONS:
        assert any(line.startswith(contract) for line in broken), (contract, proc.stdout)

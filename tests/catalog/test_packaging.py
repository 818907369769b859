"""The migrations ship inside the wheel (as cachekeeper._migrations) and an installed wheel finds them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_subpackage_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "cachekeeper").rglob("*.py")}
    missing = sorted(on_disk - listed)
    assert missing == [], f"add {missing} to [tool.setuptools] packages in pyproject.toml"


def test_an_installed_wheel_migrates_a_catalog(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("cachekeeper", "migrations"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    # The PEP 517 hook pip would call, without pip's start-up cost.
    build = f"from setuptools import build_meta; print(build_meta.build_wheel({str(tmp_path / 'dist')!r}))"
    name = subprocess.run([sys.executable, "-c", build], cwd=src, check=True, capture_output=True,
                          text=True).stdout.split()[-1]
    wheel = tmp_path / "dist" / name
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)          # a pure wheel unpacked is an installed wheel

    code = ("import cachekeeper, sys; from cachekeeper.catalog import Catalog; "
            "from cachekeeper.catalog.db import migrations_dir; "
            f"c = Catalog.open('sqlite:///{tmp_path}/c.db'); "
            "print(cachekeeper.__file__, migrations_dir(), c.current())")
    out = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(site)}, cwd=tmp_path,
                         check=True, capture_output=True, text=True).stdout.split()
    assert out == [f"{site}/cachekeeper/__init__.py", f"{site}/cachekeeper/_migrations", "0004"]

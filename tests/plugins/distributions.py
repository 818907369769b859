"""Plugins as outside packages: each directory here is a distribution (a pyproject.toml and its package).

`install` puts one into a directory the way pip lays out an install (the package, and a
`.dist-info` whose entry_points.txt is the pyproject's `[project.entry-points]`) without a build, so
`importlib.metadata` finds their entry points in any process that has the directory on PYTHONPATH. The
test process itself never imports them: what is installed there stays as the rest of the suite expects.
`pip_install` installs one with pip itself (a real build), as a user installs a plugin package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PLUGINS = ("dirstore", "echo_backend")


def install(plugin: Path, site: Path) -> None:
    """Lay out the distribution in `plugin` under `site`, as `pip install --target site` would."""
    project = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]
    for package in plugin.iterdir():
        if (package / "__init__.py").is_file():
            shutil.copytree(package, site / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    write_dist_info(site, project["name"], project["version"], project.get("entry-points", {}))


def pip_install(plugin: Path, site: Path, work: Path) -> None:
    """Build and install the distribution in `plugin` into `site` with pip itself (`pip install --target`: a
    real wheel, its entry points written by setuptools), from a copy, so the build leaves nothing here."""
    source = work / plugin.name
    shutil.copytree(plugin, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-compile", "--target", str(site), str(source)], check=True, capture_output=True,
                   timeout=300)


def write_dist_info(site: Path, name: str, version: str, entry_points: Mapping[str, Mapping[str, str]]) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for group, eps in entry_points.items()))


def echo_config(cwd: Path) -> Path:
    """`cwd/ck.yaml`: one tiny model (an empty dir) built by the echo backend plugin at one shape."""
    (cwd / "model").mkdir()
    config = cwd / "ck.yaml"
    config.write_text(f"""
version: 1
defaults:
  backends: [echo]
  shapes: {{height: [64], width: [64], batch: [1]}}
models:
  - name: tiny
    path: {cwd / "model"}
    component: transformer
""")
    return config


class Plugged:
    """Runs cachekeeper (or pytest) in a fresh process whose path holds `site` (the installed plugins)."""

    def __init__(self, site: Path, cwd: Path) -> None:
        self.site, self.cwd = site, cwd
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(site), str(REPO))),
                    "CACHEKEEPER_HOME": str(cwd / "home"), "CK_DIRSTORE_ROOT": str(cwd / "volumes")}
        for name in ("CACHEKEEPER_STORE", "CACHEKEEPER_CATALOG", "CACHEKEEPER_BACKENDS"):
            self.env.pop(name, None)

    def python(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=self.cwd,
                              env={**self.env, **env}, timeout=timeout, check=False)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def cachekeeper(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.python("-m", "cachekeeper", *args, **env)

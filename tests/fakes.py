"""A fake backend for testing the spine without torch: its build subprocess writes files derived from
the entry (small ones that get packed, one large one, and a toolchain-shared root), or fails on demand.

Enabled in a process with CACHEKEEPER_BACKENDS=fake=tests.fakes:FakeBackend. Its toolchain is the env var
FAKE_TOOLCHAIN, so tests can play "another host".
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from cachekeeper.backends.base import CACHE_ROOT, Backend, BuildCommand, BuildJob, Fingerprint

ENABLE = {"CACHEKEEPER_BACKENDS": "fake=tests.fakes:FakeBackend"}
REPO = Path(__file__).resolve().parents[1]


def fake_config(model_dir: Path, *, heights: str = "64, 128", build: str = "",
                models: tuple[tuple[str, str], ...] = (("tiny", "transformer"),)) -> str:
    """A config of the fake backend: `models` are (name, component) pairs, all loaded from `model_dir`."""
    listed = "".join(f"  - name: {name}\n    path: {model_dir}\n    component: {component}\n"
                     for name, component in models)
    return f"""
version: 1
{build}
defaults:
  backends: [fake]
  modes: [full]
  dtypes: [float32]
  shapes: {{height: [{heights}], width: [64], batch: [1]}}
models:
{listed}"""


class FakeBackend(Backend):
    name = "fake"
    env_var = "FAKE_CACHE_DIR"
    modes: ClassVar[tuple[str, ...]] = ("full", "eager")
    shared_roots = frozenset({"shared"})

    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        return Fingerprint.of("fake", {"toolchain": os.environ.get("FAKE_TOOLCHAIN", "1"), **options})

    def unavailable_reason(self, options: Mapping[str, str] | None = None) -> str | None:
        return os.environ.get("FAKE_UNAVAILABLE") or None

    def build_roots(self, workdir: Path) -> dict[str, Path]:
        return {CACHE_ROOT: workdir / "cache", "shared": workdir / "shared"}

    def extra_roots(self, options: Mapping[str, str]) -> dict[str, Path]:
        return {"shared": Path(options.get("shared_dir", os.environ.get("FAKE_SHARED_DIR", "/nonexistent")))}

    def include(self, root: str, relpath: str, path: Path) -> bool:
        return not relpath.endswith(".lock")

    def build_command(self, job: BuildJob) -> BuildCommand:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        return BuildCommand([sys.executable, "-m", "tests.fake_build", job.to_json()], env)


def served(dest: Path) -> Path:
    """The dir a hydrate into `dest` filled and named in the env: its current toolchain's own subdir
    (cachekeeper/hydration/destdir.py)."""
    import json

    return dest / json.loads((dest / ".cachekeeper" / "layout.json").read_text())["current"]

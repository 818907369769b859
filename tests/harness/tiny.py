"""The tiny models, built once per test run and shared by every module (and every xdist worker) that needs
them, instead of once per module.

`built_once` is pytest-xdist's documented recipe for a session fixture that runs once: the first worker to
take the lock builds into a folder beside the workers' own base temp dirs (`getbasetemp().parent`, the
run's own folder, so nothing is shared between runs); the others wait on the lock and reuse it. A build
counts only once its folder is renamed into place, so a failed or interrupted build is retried by the next
worker, never reused. In a single process (`-n 0`) the folder is the session's own.

The shared folders are read-only by convention: a test that writes next to a model copies it first
(`copy_tiny`), so each module keeps the private copy it had when it built its own.

`tiny_prebuilt` is the same for the compile: one real `cachekeeper prebuild` of examples/tiny.yaml (the tiny
Flux transformer, Inductor on CPU, one cold compile) per run, read by tests/backends/test_inductor_build.py
(the build's own roots, kept) and tests/test_inductor_loop.py (the store and catalog it published). The
heavy files are handed out in collection order (tests/harness/order.py), so the second of them starts long
after the first has built it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

from tests.compiles import run
from tests.simulated import REPO
from tests.simulated.harness import tiny_models


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name`, filled by `build(folder)` once per test run (across xdist workers)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        root = tmp_path_factory.getbasetemp()
    else:
        root = tmp_path_factory.getbasetemp().parent  # the run's folder; each worker's base temp is under it
    done = root / f"shared-{name}"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not done.is_dir():
            partial = root / f"shared-{name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            build(partial)
            partial.rename(done)
    return done


def _make_tiny_flux(out: Path) -> None:
    # In a subprocess, as the modules did: the test process imports neither torch nor diffusers for it.
    made = subprocess.run([sys.executable, str(REPO / "examples" / "make_tiny_model.py"), "--out", str(out),
                           "--only", "tiny-flux"], capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-4000:]


def _make_tiny_pipelines(out: Path) -> None:
    makers = tiny_models().MAKERS
    for name in ("tiny-flux2-klein", "tiny-flux1", "tiny-sd3", "tiny-sdxl"):
        makers[name](out)


@pytest.fixture(scope="session")
def tiny_flux_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared folder holding `tiny-flux/transformer` (examples/make_tiny_model.py --only tiny-flux).
    Read-only: copy it with `copy_tiny` before writing next to it."""
    return built_once(tmp_path_factory, "tiny-flux", _make_tiny_flux)


@pytest.fixture(scope="session")
def tiny_pipelines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared folder holding the tiny-flux2-klein, tiny-flux1, tiny-sd3 and tiny-sdxl pipeline folders."""
    pytest.importorskip("diffusers")
    pytest.importorskip("transformers")
    return built_once(tmp_path_factory, "tiny-pipelines", _make_tiny_pipelines)


def copy_tiny(shared: Path, dest: Path, *, ignore: tuple[str, ...] = ()) -> Path:
    """A private copy of a shared folder (every model in it, but the names in `ignore`) at `dest`; returns
    `dest`."""
    shutil.copytree(shared, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*ignore) if ignore else None)
    return dest


def _prebuild_tiny(models: Path, out: Path) -> None:
    copy_tiny(models, out / "models")
    # ./models/... resolves next to the config, in every copy of this folder.
    shutil.copy(REPO / "examples" / "tiny.yaml", out / "tiny.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEKEEPER_", "TORCHINDUCTOR_"))}
    (out / "build-tmp").mkdir()   # the builder's TMPDIR: its own header must not leak into a server's
    env |= {"CACHEKEEPER_HOME": str(out / "home"), "TMPDIR": str(out / "build-tmp"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))}
    run([sys.executable, "-m", "tests.harness.keep_builds", str(out / "builds"), "prebuild", str(out / "tiny.yaml")],
        env, out)


@pytest.fixture(scope="session")
def tiny_prebuilt(tiny_flux_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared folder: `tiny.yaml` (examples/tiny.yaml), `models/tiny-flux`, `home` (the file store and
    SQLite catalog `cachekeeper prebuild tiny.yaml` filled) and `builds/<one dir>` (that build's workdir, kept:
    `InductorBackend().build_roots(that dir)` and its result.json). Read-only: copy it (`copy_tiny`) first."""
    pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    return built_once(tmp_path_factory, "tiny-prebuild", lambda out: _prebuild_tiny(tiny_flux_models, out))

"""The README's install line works as written: taken from README.md (never copied here), run by a shell in a
checkout, into a clean venv, it installs cachekeeper with the S3 extra and no torch, and `cachekeeper` runs.

The venv is made with `python -m venv --without-pip` (ensurepip alone costs ~9 s): the line's `pip` is this
suite's pip installing into that venv (`pip --python VENV`), so nothing but what the line installs is there.
pip's cache is warm and PIP_NO_COMPILE skips byte-compiling botocore (~10 s); the test takes ~15-25 s.
The same torch-free venv shows that `doctor --device-check` without torch fails in one line.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugins.distributions import HERE as PLUGINS
from tests.plugins.distributions import install
from tests.test_docs import README, REPO, code_blocks, section

SHELL = shutil.which("zsh") or shutil.which("bash") or "sh"   # zsh reads an unquoted [s3] as a glob


def install_line() -> str:
    """The README's `pip install` line, as written."""
    [block] = code_blocks(section(README.read_text(), "Using it"))
    [line] = [ln for ln in block.splitlines() if ln.startswith("pip install")]
    return line


def test_the_install_line_is_quoted_for_every_shell() -> None:
    command = install_line().partition(" #")[0]
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "", command)
    assert not set(unquoted) & set("[]*?{}"), f"{command!r}: quote the requirement (zsh globs brackets)"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clean venv the README's line installed into, from a checkout (what the package build reads)."""
    tmp = tmp_path_factory.mktemp("readme-install")
    checkout = tmp / "cachekeeper"
    checkout.mkdir()
    skip = shutil.ignore_patterns("__pycache__")
    for name in ("pyproject.toml", "README.md", "cachekeeper", "migrations"):   # what the package build reads
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, checkout / name, ignore=skip)
        else:
            shutil.copy(REPO / name, checkout / name)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    shim = tmp / "shim"
    shim.mkdir()
    (shim / "pip").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pip --python "{venv}/bin/python" "$@"\n')
    (shim / "pip").chmod(0o755)
    env = {**clean_env(), "PATH": f"{shim}:{venv}/bin:{os.environ['PATH']}", "PIP_NO_COMPILE": "1"}
    proc = subprocess.run([SHELL, "-c", install_line()], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{SHELL} -c {install_line()!r}:\n{proc.stderr[-3000:]}"
    return venv


def clean_env() -> dict[str, str]:
    """This process's env without what would let the venv see this checkout or its .venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
            and not k.startswith("CACHEKEEPER_")}


def test_the_readme_install_line_installs_cachekeeper_with_s3_and_no_torch(installed: Path) -> None:
    version = subprocess.run([str(installed / "bin" / "cachekeeper"), "--version"], env=clean_env(),
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert version == f"cachekeeper, version {importlib.metadata.version('cachekeeper')}"
    listing = ("import importlib.metadata as m, json; "
               "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))")
    names = json.loads(subprocess.run([str(installed / "bin" / "python"), "-c", listing], env=clean_env(),
                                      capture_output=True, text=True, timeout=60, check=True).stdout)
    assert {"cachekeeper", "boto3", "click", "sqlalchemy"} <= set(names)
    heavy = [n for n in names if re.match(r"(torch|triton|nvidia|diffusers)", n)]
    assert heavy == [], f"the core install pulled {heavy}"


def test_the_device_check_without_torch_fails_in_one_line_for_any_backend(installed: Path,
                                                                          tmp_path: Path) -> None:
    """No torch here: the inductor backend refuses the check before it starts; a plugin backend's check fails
    at the tiny model it needs torch for, in one line naming torch, with a hint that fits the check."""
    install(PLUGINS / "echo_backend", tmp_path / "site")
    env = {**clean_env(), "PYTHONPATH": str(tmp_path / "site"), "CACHEKEEPER_HOME": str(tmp_path / "home"),
           "CACHEKEEPER_BACKENDS": "echo=ck_echo_backend:EchoBackend"}
    cachekeeper = str(installed / "bin" / "cachekeeper")
    for backend, code, error, hint in [
        ("inductor", 6, "error: inductor: cannot run the device check here: ", "hint: run it on the inductor host"),
        ("echo", 7, "error: device check: the tiny model needs torch, which is not installed in this environment "
                    f"({installed}/bin/python)", "hint: install it where the check runs (the built-in tiny model "
                                                 "needs torch and diffusers: the `build` extra), or give the check a "
                                                 "diffusers transformer dir of your own: `cachekeeper doctor "
                                                 "--device-check --model DIR`"),
    ]:
        proc = subprocess.run([cachekeeper, "doctor", "--device-check", "--backend", backend], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        lines = proc.stderr.splitlines()
        assert proc.returncode == code and "Traceback" not in proc.stderr, proc.stderr
        assert len(lines) == 2 and lines[0].startswith(error) and lines[1].startswith(hint), proc.stderr

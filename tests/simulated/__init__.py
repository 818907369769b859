"""SIMULATED device packages for tests on hosts without Trainium or TPU hardware.

tests/simulated/pkgs holds simulations of torch_neuronx, neuronxcc, torch_tpu and libtpu (plus their
shared `_devicesim`): they write and read compile caches in the real layouts and count compiles, but run
nothing on a device (see each package's docstring). They are never installed; a test puts them on
PYTHONPATH together with a generated "site" dir of `*.dist-info` metadata, so `importlib.metadata`
reports whatever versions the test chose, and a compiler upgrade is a second site dir:

    site = make_site(tmp_path / "site", {**DEFAULT_VERSIONS, "neuronx-cc": "2.23.0.0"})
    env = {"PYTHONPATH": pythonpath(site)}

`python -m tests.simulated DIR` writes a site with the default versions, for trying things by hand.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

SIM_PKGS = Path(__file__).resolve().parent / "pkgs"
REPO = Path(__file__).resolve().parents[2]

DEFAULT_VERSIONS: dict[str, str] = {
    "torch-neuronx": "2.13.0.1",
    "neuronx-cc": "2.22.1.0",
    "torch-tpu": "0.5.0",
    "libtpu": "0.0.24",
}
NEURON = ("torch-neuronx", "neuronx-cc")
TPU = ("torch-tpu", "libtpu")


def _dist_dir(name: str, version: str) -> str:
    return f"{name.replace('-', '_')}-{version}.dist-info"


def _record(name: str, version: str) -> str:
    if name != "libtpu":
        return ""
    # A real libtpu wheel's RECORD lists libtpu/libtpu.so with its sha256; ours changes with the version.
    fake = hashlib.sha256(f"simulated libtpu.so {version}".encode()).digest()
    b64 = base64.urlsafe_b64encode(fake).rstrip(b"=").decode()
    return f"libtpu/__init__.py,,\nlibtpu/libtpu.so,sha256={b64},123456\n"


def make_site(dest: Path, versions: Mapping[str, str | None]) -> Path:
    """A dir of `<name>-<version>.dist-info` for each package whose version is not None."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, version in versions.items():
        if version is None:
            continue
        info = dest / _dist_dir(name, version)
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        if record := _record(name, version):
            (info / "RECORD").write_text(record)
    return dest


def pythonpath(site: Path, *, packages: bool = True) -> str:
    """PYTHONPATH for a subprocess: the site's metadata, the simulated packages, the repo (for tests.*)."""
    parts = [str(site)] + ([str(SIM_PKGS)] if packages else []) + [str(REPO)]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)

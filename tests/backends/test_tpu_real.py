"""The released torch-tpu 0.2.0 is the contract: TPUBackend against the installed package, not a simulation.

The package lives in an environment of its own, .venv-tpu (scripts/setup_tpu; CACHEKEEPER_TPU_PYTHON names
another interpreter): installed beside the test venv's torch it would autoload into every `import torch`.
So each test asks that interpreter, in a subprocess, what the package exposes (tests/backends/
real_tpu_probe.py), and reads what only its binaries show from the installed files. A fact that a new
release changes fails here, by name, on the day of the upgrade. Without the package every test skips, saying so.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.tpu import TPUBackend
from cachekeeper.backends.tpu.backend import INSTALL_HINT, RUNTIME_ENV, TOOLCHAIN
from cachekeeper.backends.tpu.launch import SLOT_VARS
from tests.simulated import REPO

pytestmark = pytest.mark.real_tpu

TPU_PYTHON = Path(os.environ.get("CACHEKEEPER_TPU_PYTHON") or REPO / ".venv-tpu" / "bin" / "python")
RELEASE = "0.2.0"
K = "0123456789abcdef"


def _skip_reason() -> str | None:
    if not TPU_PYTHON.exists():
        return f"torch-tpu is not installed: no {TPU_PYTHON} (run scripts/setup_tpu)"
    code = "import importlib.metadata as m; print(m.version('torch-tpu'))"
    probe = subprocess.run([str(TPU_PYTHON), "-I", "-c", code], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"torch-tpu is not installed in {TPU_PYTHON} (run scripts/setup_tpu)"
    return None


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    if reason := _skip_reason():
        pytest.skip(reason)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_TPU", "TPU_", "PYTHONPATH"))}
    return {**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONPATH": str(REPO)}


@cache
def facts() -> dict[str, Any]:
    proc = subprocess.run([str(TPU_PYTHON), str(REPO / "tests" / "backends" / "real_tpu_probe.py")], env=_env(),
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@cache
def glue() -> bytes:
    return Path(facts()["glue_so"]).read_bytes()


@cache
def python_sources() -> str:
    return "\n".join(p.read_text(errors="replace") for p in Path(facts()["package_dir"]).rglob("*.py"))


def in_binary(data: bytes, text: str) -> bool:
    return re.search(rb"(?<![A-Za-z0-9_])" + re.escape(text.encode()) + rb"(?![A-Za-z0-9_])", data) is not None


def release_fact(present: bool, what: str) -> None:
    assert present, (f"torch-tpu {facts()['versions']['torch-tpu']} no longer shows {what}: re-read the release "
                     "against docs/backends.md (TorchTPU, assumptions) before trusting its tier-3 cache")


# --- the loader ------------------------------------------------------------------------------------


def test_the_build_loader_calls_the_packages_load_through_its_entry_point() -> None:
    f = facts()
    assert TOOLCHAIN.entry_point == "torch_tpu"   # the entry point's name the build calls
    assert f["entry_points"][TOOLCHAIN.entry_point] == "torch_tpu._loader:load"
    assert (f["old_autoload"], f["loaded_at_import"]) == ("0", False)   # what a build's import alone does
    assert f["load_calls"] == 1                                         # cachekeeper's loader ran load()


def test_on_a_cpu_host_the_loader_reports_no_chip_not_a_missing_package() -> None:
    f = facts()
    if f["package_chip_count"]:
        pytest.skip("this host has TPU chips")
    assert f["loader_error"] == "torch_tpu's loader ran but registered no 'tpu' device: no chip on this host"
    assert f["our_chip_count"] == f["package_chip_count"] == 0


def test_the_runtime_counters_are_callable() -> None:
    """cachekeeper.backends.tpu.counters reads `_get_cache_stats()` of the real package (0 on a CPU host)."""
    assert set(facts()["counters"]) == {"compiled", "loaded", "requests", "tier1_misses"}
    assert all(isinstance(v, int) for v in facts()["counters"].values())
    assert facts()["stats_fields"] == ["num_cache_hits", "num_cache_reqs", "per_entry_stats"]


@cache
def ops_so() -> bytes:
    return Path(facts()["ops_so"]).read_bytes()


@pytest.mark.parametrize(("text", "where", "what"), [
    ("_get_cache_stats", "ops", "the PerfStats binding the device check counts with"),
    ("per_entry_stats", "ops", "the per-entry stats (compiled = compilation_duration > 0)"),
    ("compilation_duration", "ops", "the per-entry compile time (zero for tier-2/3 loads)"),
    ("num_cache_reqs", "ops", "the request count"),
    ("TORCH_TPU_INTERNAL_TIER3_COMPILATION_CACHE_LOCAL_BACKUP_TASK", "glue", "the backup-compilation switch"),
    ("TPU_VISIBLE_DEVICES", "glue", "the single-device placement variable a slot sets with TPU_VISIBLE_CHIPS"),
    ("InitializeSingleDeviceEnvironment", "glue", "the single-device env rewrite"),
    ("/dev/shm/torch_tpu_cache", "glue", "the tier-2 directory a build's private name lives in"),
])
def test_the_release_still_has_every_name_the_device_check_and_builds_rely_on(text: str, where: str,
                                                                            what: str) -> None:
    data = ops_so() if where == "ops" else glue()
    release_fact(text.encode() in data, f"{what} ({text!r})")


# --- versions and the libtpu binary ----------------------------------------------------------------


def test_versions_and_the_libtpu_binary_id_come_from_the_real_metadata() -> None:
    f = facts()
    assert f["versions"]["torch-tpu"] == RELEASE, "a new torch-tpu release: re-read it (docs/backends.md)"
    fields = f["fingerprint"]
    assert (fields["torch_tpu"], fields["libtpu"], fields["torch"]) == (
        f["versions"]["torch-tpu"], f["versions"]["libtpu"], f["versions"]["torch"])
    assert fields["pjrt_platform"] == f["libtpu_record"] and fields["pjrt_platform"].startswith("libtpu.so:sha256=")
    assert Path(f["libtpu_so"]).is_file()


# --- env var names ---------------------------------------------------------------------------------


def test_every_env_var_the_backend_sets_or_reads_exists_in_the_real_package(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.backends.base import BuildJob, ModelRef
    from tests.simulated.harness import clear_device_env, entry, install

    clear_device_env(monkeypatch)
    install(monkeypatch, tmp_path / "site")   # only for build_command's version check in this process
    backend = TPUBackend(env={})
    job = BuildJob(entry("tpu", "full"), ModelRef("m", "transformer", path=str(tmp_path)),
                   {"cache": str(tmp_path / "cache")}, {"xla_flags": "--a", "libtpu_init_args": "--b"}, "")
    added = set(backend.build_command(job).env) - set(os.environ)
    names = added | set(backend.device_env([0, 1])) | set(SLOT_VARS) | set(RUNTIME_ENV)
    assert added | set(backend.device_env([0, 1])) | set(SLOT_VARS) <= set(RUNTIME_ENV)
    libtpu = Path(facts()["libtpu_so"]).read_bytes()
    missing = [n for n in sorted(names)
               if not (re.search(rf"\b{n}\b", python_sources()) or in_binary(glue(), n) or in_binary(libtpu, n))]
    assert not missing, f"not in torch-tpu's Python files, its glue library or libtpu.so: {missing}"


@pytest.mark.parametrize("gone", ["TORCH_TPU_INTERNAL_TIER2_COMPILATION_CACHE",
                                  "TORCH_TPU_INTERNAL_TIER3_COMPILATION_CACHE_ROOT", "TPU_DEFER_AND_FUSE"])
def test_variables_the_backend_no_longer_names_are_absent_from_the_release(gone: str) -> None:
    assert not in_binary(glue(), gone) and gone not in python_sources()


# --- tier-3 file names (only the binary shows them) --------------------------------------------------


@pytest.mark.parametrize(("text", "what"), [
    ("%016x_%016x_%016x", "the three-part tier-3 name format"),
    ("%016x_%016x_%016x_%s", "the four-part tier-3 name format (with id_key)"),
    ("/dev/shm/torch_tpu_cache", "the tier-2 directory"),
    ("C API version: ", "the platform fingerprint's C API version"),
    ("Tier-2 compilation cache is disabled as requested by the ", "tier 2 off only on request"),
    ("cannot read tier-3 cache file ", "an unreadable tier-3 file being a miss"),
    (".tmp", "the temp-file suffix"),
])
def test_the_glue_library_still_shows(text: str, what: str) -> None:
    release_fact(text.encode() in glue(), f"{what} ({text!r})")


def test_the_artifact_filter_takes_both_name_forms_and_rejects_real_temp_names(tmp_path: Path) -> None:
    backend, platform = TPUBackend(), K
    names = [f"{K}_{K}_{K}", f"{K}_{K}_{K}_{'idkey'}"]
    for fmt, name in zip(("%016x_%016x_%016x", "%016x_%016x_%016x_%s"), names, strict=True):
        release_fact(fmt.encode() in glue(), f"the name format {fmt!r}")
        real = (fmt % (1, 2, 3)) if fmt.count("%") == 3 else (fmt % (1, 2, 3, "idkey"))
        for n in (name, real):
            path = tmp_path / platform / f"{n}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")
            assert backend.include("cache", f"{platform}/{n}.bin", path), n
            # the runtime's temp: <entry>.bin.<host>-<tid hex>-<pid>-<us hex>.<n>.tmp
            temp = (f"{n}.bin.{socket.gethostname()}-{threading.get_ident():x}-{os.getpid()}-"
                    f"{int(time.time() * 1e6):x}.0.tmp")
            (tmp_path / platform / temp).write_bytes(b"x")
            assert not backend.include("cache", f"{platform}/{temp}", tmp_path / platform / temp), temp


# --- distributed launch -----------------------------------------------------------------------------


def test_the_launch_helper_takes_nproc_per_node_and_the_diffusers_launcher_is_absent() -> None:
    f = facts()
    assert "nproc_per_node" in f["set_tpu_launch_env_params"]
    assert f["diffusers_launcher_exists"] is False
    for var in ("TORCH_TPU_SLICEBUILDER_ADDRESSES", "TORCH_TPU_TOPOLOGY"):
        assert var in python_sources()
    for var in SLOT_VARS[:5]:   # overwritten by the runtime once WORLD_SIZE is set
        release_fact(in_binary(glue(), var), f"{var} in the worker configuration")


# --- doctor ----------------------------------------------------------------------------------------


def test_doctor_on_a_cpu_host_names_no_tpu_chip_not_a_missing_package() -> None:
    if facts()["package_chip_count"]:
        pytest.skip("this host has TPU chips")
    proc = subprocess.run([str(TPU_PYTHON), "-m", "cachekeeper", "doctor", "--json", "--backend", "tpu"],
                          env=_env(), cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout)["backends"][0]
    assert row["reason"] is None and row["fingerprint"]["fields"]["torch_tpu"] == RELEASE
    assert row["device"].startswith("no TPU chip on this host")
    assert "not installed" not in proc.stdout and INSTALL_HINT not in proc.stdout

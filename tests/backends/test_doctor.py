"""`cachekeeper doctor` against simulated device hosts, and the light-import promise of the backends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cachekeeper.backends.neuron import NeuronBackend
from cachekeeper.backends.tpu import TPUBackend
from cachekeeper.cli.doctor import doctor
from tests.simulated.harness import clear_device_env, install


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    clear_device_env(monkeypatch)
    return install(monkeypatch, tmp_path / "site")


def report(*args: str, exit_code: int = 0) -> dict[str, Any]:
    result = CliRunner().invoke(doctor, ["--json", *args])
    assert result.exit_code == exit_code, result.output
    return {row["backend"]: row for row in json.loads(result.output)["backends"]}


def test_every_registered_backend_gets_a_row_and_device_backends_a_fingerprint() -> None:
    rows = report()
    assert {"inductor", "neuron", "tpu", "neuron_xla"} <= set(rows)
    for name in ("neuron", "tpu", "neuron_xla"):
        assert rows[name]["usable"] is True, rows[name]
    assert rows["neuron"]["fingerprint"]["id"] == NeuronBackend().fingerprint({}).id
    assert rows["neuron"]["fingerprint"]["fields"]["neuronx_cc"] == "2.22.1.0"


def test_cache_dirs_come_from_the_env_var_or_the_runtime_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", "/srv/neff")
    rows = report()
    assert rows["neuron"]["cache_dir"] == {"path": "/srv/neff", "source": "env TORCH_NEURONX_NEFF_CACHE_DIR"}
    assert rows["neuron_xla"]["cache_dir"]["path"] == "/var/tmp/neuron-compile-cache"
    assert rows["tpu"]["cache_dir"]["path"] is None  # tier 3 is off until its root is set


def test_env_that_would_leave_hydrated_artifacts_unused_is_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_TPU_TIER2_COMPILATION_CACHE", "disabled")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    rows = report()
    assert any("TORCH_TPU_TIER2_COMPILATION_CACHE=disabled" in w for w in rows["tpu"]["warnings"])
    assert any("TORCH_NEURONX_NEFF_DISABLE_CACHE" in w for w in rows["neuron"]["warnings"])


def test_config_backend_options_feed_the_fingerprint(tmp_path: Path) -> None:
    config = tmp_path / "ck.yaml"
    config.write_text("version: 1\ndefaults:\n  backends: [neuron]\n  shapes: ['64x64']\n"
                      "backend_options:\n  neuron: {target: trn3, logical_nc_config: 1}\n  tpu: {chip: v7x}\n"
                      "models:\n  - name: m\n    path: ./m\n")
    rows = report("--config", str(config))
    assert rows["neuron"]["fingerprint"]["fields"]["target"] == "trn3"
    assert rows["neuron"]["fingerprint"]["id"] == NeuronBackend().fingerprint(
        {"target": "trn3", "logical_nc_config": "1"}).id
    assert rows["tpu"]["fingerprint"]["id"] == TPUBackend().fingerprint({"chip": "v7x"}).id


def test_an_unusable_backend_asked_for_by_name_says_why_and_fails(host: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(host)])
    install(monkeypatch, tmp_path / "bare", torch_neuronx=None)
    rows = report("--backend", "neuron", exit_code=6)
    assert set(rows) == {"neuron"}
    assert rows["neuron"]["usable"] is False and "pip install torch-neuronx" in rows["neuron"]["reason"]


def test_text_output_names_each_backend_its_fingerprint_and_cache_dir() -> None:
    out = CliRunner().invoke(doctor, ["--backend", "tpu"]).output
    assert out.startswith("tpu: usable\n  fingerprint ")
    assert "cache dir: - (TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT unset" in out


def test_backends_and_doctor_never_import_torch() -> None:
    code = """
import sys
from click.testing import CliRunner
from pathlib import Path
from cachekeeper.backends import get_backend
from cachekeeper.cli.doctor import doctor
for name in ("neuron", "tpu", "neuron_xla"):
    b = get_backend(name)
    b.fingerprint({}); b.env_exports(Path("/x")); b.include("cache", "a/b/c", Path("/x/a/b/c"))
assert CliRunner().invoke(doctor, ["--json"]).exit_code == 0
print(sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "diffusers"))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

"""NeuronBackend without builds: fingerprint fields and sensitivity, pins, missing packages, include, command.

Versions come from simulated package metadata (tests/simulated); nothing here imports torch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cachekeeper.backends.base import BuildJob, ModelRef
from cachekeeper.backends.neuron import NeuronBackend
from cachekeeper.backends.neuron.probes import family_of, probe_target
from cachekeeper.errors import BackendUnavailable, ConfigError
from tests.simulated.harness import apply_change, clear_device_env, entry, install

BASE = {"target": "trn2"}
KEY = "abcd" + "0123456789abcdef0123456789ab"  # 32 hex


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    clear_device_env(monkeypatch)
    return install(monkeypatch, tmp_path / "site")


def test_fingerprint_names_versions_target_and_compiler_knobs() -> None:
    fields = dict(NeuronBackend().fingerprint(BASE).fields)
    assert fields["torch_neuronx"] == "2.13.0.1"
    assert fields["neuronx_cc"] == "2.22.1.0"  # the one the runtime's own NEFF key leaves out
    assert fields["torch"]  # the real torch of this venv
    assert fields["target"] == "trn2"
    assert fields["logical_nc_config"] == "2"  # the runtime default
    assert fields["opt_level"] == "default"
    assert fields["cc_flags"] == ""


@pytest.mark.parametrize(("field", "change"), [
    ("neuronx_cc", "site:neuronx_cc=2.23.0.0"),
    ("torch_neuronx", "site:torch_neuronx=2.14.0.0"),
    ("target", "option:target=trn3"),
    ("logical_nc_config", "env:NEURON_LOGICAL_NC_CONFIG=1"),
    ("logical_nc_config", "option:logical_nc_config=1"),
    ("opt_level", "env:NEURON_COMPILER_OPT_LEVEL=3"),
    ("cc_flags", "env:NEURON_CC_FLAGS=--auto-cast=none"),
    ("env.NEURON_RT_VIRTUAL_CORE_SIZE", "env:NEURON_RT_VIRTUAL_CORE_SIZE=1"),
    ("option.text_len", "option:text_len=77"),
])
def test_each_field_separates_toolchains(field: str, change: str, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    before = NeuronBackend().fingerprint(BASE)
    after = NeuronBackend().fingerprint(apply_change(change, BASE, monkeypatch, tmp_path))
    assert after.id != before.id
    assert set(before.diff(after)) == {field}


def test_target_comes_from_the_runtime_override_when_the_config_names_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    assert NeuronBackend().fingerprint({}).get("target") == "trn3"


def test_irrelevant_differences_do_not_separate_toolchains(monkeypatch: pytest.MonkeyPatch) -> None:
    before = NeuronBackend().fingerprint({**BASE})
    monkeypatch.setenv("NEURON_CC_FLAGS", "")
    monkeypatch.setenv("SOME_UNRELATED_VAR", "1")
    # Where the cache is and which device a CLI names are not toolchain properties.
    after = NeuronBackend().fingerprint({**BASE, "device": "neuron", "import_from": "/x"})
    assert after.id == before.id


def test_cc_flags_compare_whitespace_insensitively(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_CC_FLAGS", "--model-type=transformer  -O1")
    a = NeuronBackend().fingerprint(BASE)
    monkeypatch.setenv("NEURON_CC_FLAGS", " --model-type=transformer -O1 ")
    assert NeuronBackend().fingerprint(BASE).id == a.id


def test_an_invalid_target_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="target must be one of trn2, trn3"):
        NeuronBackend().fingerprint({"target": "inf2"})


def test_target_probe_reads_the_driver_sysfs_then_dmi(tmp_path: Path) -> None:
    sysfs, dmi = tmp_path / "arch", tmp_path / "product_name"
    sysfs.mkdir()
    assert probe_target({}, sysfs, dmi) == "unknown"  # no neuron-ls on this host either
    dmi.write_text("trn2u.48xlarge\n")
    assert probe_target({}, sysfs, dmi) == "trn2"
    (sysfs / "device_name").write_text("Trainium3\n")
    assert probe_target({}, sysfs, dmi) == "trn3"
    assert probe_target({"NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"}, sysfs, dmi) == "trn2"
    assert family_of("inf2.xlarge") is None


# --- availability and pins -------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["torch_neuronx", "neuronx_cc"])
def test_a_missing_package_makes_the_backend_unavailable_with_an_install_hint(
        missing: str, host: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(host)])
    install(monkeypatch, tmp_path / "bare", **{missing: None})
    backend = NeuronBackend()
    reason = backend.unavailable_reason()
    assert reason is not None and missing.replace("_", "-") in reason and "pip install torch-neuronx" in reason
    with pytest.raises(BackendUnavailable, match="not installed") as exc:
        backend.fingerprint(BASE)
    assert "\n" not in str(exc.value) and exc.value.hint.startswith("pip install torch-neuronx")
    with pytest.raises(BackendUnavailable, match="not installed"):
        backend.build_command(_job(tmp_path))


def test_a_pin_may_name_a_release_series(tmp_path: Path) -> None:
    backend = NeuronBackend()
    options = {**BASE, "neuronx_cc_version": "2.22", "torch_neuronx_version": "2.13.0.1"}
    assert backend.fingerprint(options).id == backend.fingerprint(BASE).id  # pins are checked, not recorded
    with pytest.raises(BackendUnavailable, match=r"torch-neuronx 2\.14"):
        backend.build_command(_job(tmp_path, {"torch_neuronx_version": "2.14"}))


# --- build command ---------------------------------------------------------------------------------


def _job(tmp_path: Path, options: dict[str, str] | None = None, tp: int = 1) -> BuildJob:
    # The command does not read the model: a path that does not exist is fine here.
    return BuildJob(entry("neuron", "full", tp=tp), ModelRef("m", "transformer", path=str(tmp_path / "m")),
                    {"cache": str(tmp_path / "w" / "cache")}, options or {}, str(tmp_path / "w" / "result.json"))


def test_build_command_points_the_runtime_at_the_fresh_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1")
    cmd = NeuronBackend().build_command(_job(tmp_path, {"target": "trn3", "logical_nc_config": "1"}))
    assert cmd.argv[1:3] == ["-m", "cachekeeper.backends.neuron.build"]
    assert json.loads(cmd.argv[3])["spec"]["backend"] == "neuron"
    env = cmd.env
    assert env["TORCH_NEURONX_NEFF_CACHE_DIR"] == str(tmp_path / "w" / "cache")
    # Lock files live beside the cache root, never inside it.
    assert env["TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"] == str(tmp_path / "w" / "neff_locks")
    assert env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"
    assert env["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn3" and env["NEURON_LOGICAL_NC_CONFIG"] == "1"
    assert "TORCH_NEURONX_NEFF_DISABLE_CACHE" not in env



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
from cachekeeper.bounds import BUILD_TIMEOUT
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


def test_cc_flags_are_fingerprinted_byte_for_byte_as_the_runtime_keys_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.1.0 KernelExecution.cpp keys on the raw NEURON_CC_FLAGS (spaces as `_`): two spellings, two keys."""
    monkeypatch.setenv("NEURON_CC_FLAGS", "--model-type=transformer -O1")
    canonical = NeuronBackend().fingerprint(BASE)
    assert canonical.get("cc_flags") == "--model-type=transformer -O1"
    monkeypatch.setenv("NEURON_CC_FLAGS", " --model-type=transformer  -O1")
    spelled = NeuronBackend().fingerprint(BASE)
    assert spelled.id != canonical.id and spelled.get("cc_flags") == " --model-type=transformer  -O1"


def test_a_canonical_flags_string_keeps_the_fingerprint_of_earlier_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only spellings that whitespace-normalising changed get a new fingerprint id (docs/backends.md): the
    field of a canonical string is the value earlier releases recorded (normalize_flags), so the id holds."""
    from cachekeeper.backends.toolchain import normalize_flags

    for flags in ("--auto-cast=none -O1", "", "--a  --b", " --a"):
        monkeypatch.setenv("NEURON_CC_FLAGS", flags)
        field = NeuronBackend().fingerprint(BASE).get("cc_flags")
        assert (field == normalize_flags(flags)) is (flags == normalize_flags(flags))


def test_hydrate_exports_the_exact_flags_lnc_and_opt_level_of_the_fingerprint(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    backend = NeuronBackend()
    backend.fingerprint({**BASE, "cc_flags": "--a=1  --b", "logical_nc_config": "1", "opt_level": "3"})
    assert backend.env_exports(tmp_path) == {
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path), "NEURON_CC_FLAGS": "--a=1  --b",
        "NEURON_LOGICAL_NC_CONFIG": "1", "NEURON_COMPILER_OPT_LEVEL": "3"}


def test_flags_spelled_differently_from_the_builds_are_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_CC_FLAGS", "--a=1 --b")
    warnings = NeuronBackend().env_warnings({**BASE, "cc_flags": "--a=1  --b"})
    assert [w for w in warnings if "NEURON_CC_FLAGS" in w] == [
        "NEURON_CC_FLAGS='--a=1 --b' is spelled differently from the build's cc_flags '--a=1  --b': the runtime "
        "keys on the exact string; hydrate --print-env exports the build's"]


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
    assert env["NEURON_LOGICAL_NC_CONFIG"] == "1"
    # 0.1.0 never reads the override: the device sets the target (the build checks it, build side)
    assert "NEURON_PLATFORM_TARGET_OVERRIDE" not in env
    assert "TORCH_NEURONX_NEFF_DISABLE_CACHE" not in env
    # counters on, no NKI trace cache from another run, no lock broken before the build times out
    assert env["TORCH_NEURONX_METRICS_ENABLED"] == "1" and env["NKI_ENABLE_TRACE_CACHE"] == "0"
    assert int(env["TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"]) >= BUILD_TIMEOUT.high


def test_a_build_drops_settings_that_change_neff_bytes_but_not_the_key_with_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NEURON_FRAMEWORK_DEBUG", "NKI_DEBUG_INFO", "XLA_IR_DEBUG", "XLA_HLO_DEBUG"):
        monkeypatch.setenv(var, "1")
    env = NeuronBackend().build_command(_job(tmp_path)).env
    assert not {"NEURON_FRAMEWORK_DEBUG", "NKI_DEBUG_INFO", "XLA_IR_DEBUG", "XLA_HLO_DEBUG"} & set(env)
    assert env["CACHEKEEPER_BUILD_WARNINGS"] == (
        "neuron: the build drops NEURON_FRAMEWORK_DEBUG, NKI_DEBUG_INFO, XLA_IR_DEBUG, XLA_HLO_DEBUG "
        "(it changes NEFF bytes but not the runtime's key)")


@pytest.mark.parametrize(("visible", "rank", "cores"), [("4-7", 0, "4"), ("4-7", 1, "5"), ("2", 1, "3"),
                                                        ("6,7", 1, "7")])
def test_each_tensor_parallel_rank_gets_one_core_of_the_slot(visible: str, rank: int, cores: str) -> None:
    env = {"NEURON_RT_VISIBLE_CORES": visible, "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)}
    assert NeuronBackend().rank_env(env) == {"NEURON_RT_VISIBLE_CORES": cores}
    assert NeuronBackend().rank_env({**env, "WORLD_SIZE": "1"}) == {}      # one process: the whole slot
    assert NeuronBackend().rank_env({"WORLD_SIZE": "2", "LOCAL_RANK": "1"}) == {}   # unset: the runtime binds


@pytest.mark.parametrize(("rel", "kept"), [
    ("ab/cd/abcd0123456789abcdef0123456789ab.neff", True),
    ("ab/cd/ab000123456789abcdef0123456789ab.neff", False),      # shard dirs are the key's first bytes
    (f"{'e' * 64}/{'e' * 64}.neff", True),                      # the Python path (NEURON_LAUNCH_BLOCKING=1)
    (f"{'e' * 64}/{'f' * 64}.neff", False),
    (f"{'e' * 64}/tmpab12cd.tmp", False),
])
def test_include_keeps_both_neff_layouts(rel: str, kept: bool, tmp_path: Path) -> None:
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    path.write_bytes(b"neff")
    assert NeuronBackend().include("cache", rel, path) is kept




def test_cachekeeper_env_exports_the_builds_exact_flags(tmp_path: Path) -> None:
    import shlex

    from click.testing import CliRunner

    from cachekeeper.cli import _register, cli

    _register()
    result = CliRunner().invoke(cli, ["env", "--backend", "neuron", "--dest", str(tmp_path), "--option",
                                      "target=trn2", "--option", "cc_flags=--a=1  --b"])
    assert result.exit_code == 0, result.output
    assert f"export NEURON_CC_FLAGS={shlex.quote('--a=1  --b')}" in result.stdout.splitlines()
    assert "export NEURON_LOGICAL_NC_CONFIG=2" in result.stdout.splitlines()


def test_a_target_option_on_another_device_family_is_refused_before_the_build(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    from cachekeeper.backends.neuron import probes

    monkeypatch.setattr(probes, "from_sysfs", lambda *a: "trn2")   # the driver says: a trn2 device
    with pytest.raises(BackendUnavailable) as exc:
        NeuronBackend().build_command(_job(tmp_path, {"target": "trn3"}))
    assert str(exc.value) == ("neuron: the build's target is trn3 but this host's device is trn2: the runtime keys "
                              "NEFFs on the device's target and never reads NEURON_PLATFORM_TARGET_OVERRIDE")
    assert NeuronBackend().build_command(_job(tmp_path, {"target": "trn2"})).argv

"""TPUBackend without builds: fingerprint fields and sensitivity, tier-2 guard, pins, include, command.

Versions come from simulated package metadata (tests/simulated); nothing here imports torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cachekeeper.backends.base import BuildJob, ModelRef
from cachekeeper.backends.tpu import TPUBackend
from cachekeeper.errors import BackendUnavailable, ConfigError
from tests.simulated.harness import apply_change, clear_device_env, entry, install

BASE = {"chip": "v6e", "topology": "2x4"}
K = "0123456789abcdef"


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    clear_device_env(monkeypatch)
    return install(monkeypatch, tmp_path / "site")


def test_fingerprint_names_versions_platform_chip_topology_and_flags() -> None:
    fields = dict(TPUBackend().fingerprint(BASE).fields)
    assert (fields["torch_tpu"], fields["libtpu"]) == ("0.5.0", "0.0.24")
    assert fields["pjrt_platform"].startswith("libtpu.so:sha256=")  # from libtpu's RECORD, not by loading it
    assert (fields["chip"], fields["topology"]) == ("v6e", "2x4")
    assert fields["xla_flags"] == fields["libtpu_init_args"] == ""


@pytest.mark.parametrize(("field", "change"), [
    ("torch_tpu", "site:torch_tpu=0.6.0"),
    ("chip", "option:chip=v7x"),
    ("topology", "option:topology=4x4"),
    ("libtpu_init_args", "env:LIBTPU_INIT_ARGS=--xla_tpu_enable_latency_hiding_scheduler=true"),
    ("xla_flags", "env:XLA_FLAGS=--xla_dump_to=/tmp/x"),
    ("env.TORCH_TPU_INTERNAL_XLA_OPTIONS", "env:TORCH_TPU_INTERNAL_XLA_OPTIONS=a=b"),
])
def test_each_field_separates_toolchains(field: str, change: str, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    before = TPUBackend().fingerprint(BASE)
    after = TPUBackend().fingerprint(apply_change(change, BASE, monkeypatch, tmp_path))
    assert after.id != before.id
    assert set(before.diff(after)) == {field}


def test_a_libtpu_upgrade_changes_its_version_and_the_platform_binary(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    before = TPUBackend().fingerprint(BASE)
    install(monkeypatch, tmp_path / "site2", libtpu="0.0.25")
    assert set(before.diff(TPUBackend().fingerprint(BASE))) == {"libtpu", "pjrt_platform"}


def test_chip_and_topology_come_from_cloud_env_when_the_config_names_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v6e-8")
    fields = dict(TPUBackend().fingerprint({}).fields)
    assert (fields["chip"], fields["topology"]) == ("v6e", "v6e-8")
    monkeypatch.setenv("TORCH_TPU_TOPOLOGY", "2x4")
    assert TPUBackend().fingerprint({}).get("topology") == "2x4"


def test_an_unknown_chip_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="chip must be one of v6e, v7x"):
        TPUBackend().fingerprint({"chip": "v3"})


# --- tier 2 must stay on ---------------------------------------------------------------------------


def test_boot_hook_refuses_a_disabled_tier2_because_tier3_dies_with_it(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    backend, var = TPUBackend(), "TORCH_TPU_TIER2_COMPILATION_CACHE"
    assert backend.env_exports(tmp_path) == {"TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT": str(tmp_path)}
    monkeypatch.setenv(var, "disabled")
    with pytest.raises(BackendUnavailable, match=f"{var}=disabled turns off tier 2") as exc:
        backend.env_exports(tmp_path)
    assert exc.value.hint == f"unset {var} before the server starts"
    assert any("tier 2" in w for w in backend.env_warnings({}))


@pytest.mark.parametrize(("var", "value"), [
    ("TORCH_TPU_TIER2_COMPILATION_CACHE", "shared"),     # 0.2.0: any other value is the tier-2 cache's name
    ("TORCH_TPU_TIER2_COMPILATION_CACHE", "Disabled"),   # only exactly `disabled` turns it off
    ("TORCH_TPU_TIER2_COMPILATION_CACHE", ""),           # empty is unset: on, since tier 3 is configured
    ("TORCH_TPU_INTERNAL_TIER2_COMPILATION_CACHE", "disabled"),   # no such variable in 0.2.0
])
def test_only_exactly_disabled_turns_tier2_off(var: str, value: str, monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv(var, value)
    assert TPUBackend().env_exports(tmp_path)  # no refusal
    assert not any("tier 2" in w for w in TPUBackend().env_warnings({}))


def test_a_build_drops_a_host_setting_that_disables_tier2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TORCH_TPU_TIER2_COMPILATION_CACHE", "disabled")
    env = TPUBackend().build_command(_job(tmp_path, "eager")).env
    assert "TORCH_TPU_TIER2_COMPILATION_CACHE" not in env
    assert env["TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"] == str(tmp_path / "w" / "cache")


# --- pins, availability ----------------------------------------------------------------------------


def test_a_missing_torch_tpu_is_unavailable_with_an_install_hint(host: Path, monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(host)])
    install(monkeypatch, tmp_path / "bare", torch_tpu=None)
    reason = TPUBackend().unavailable_reason()
    assert reason is not None and "torch-tpu is not installed" in reason and "pip install" in reason
    with pytest.raises(BackendUnavailable, match="torch-tpu is not installed"):
        TPUBackend().fingerprint(BASE)


# --- build command ------------------------------------------------------------------------------------


def _job(tmp_path: Path, mode: str, tp: int = 1) -> BuildJob:
    return BuildJob(entry("tpu", mode, tp=tp), ModelRef("m", "transformer", path=str(tmp_path / "m")),
                    {"cache": str(tmp_path / "w" / "cache")}, {"xla_flags": "--a=1"}, str(tmp_path / "r.json"))



def test_a_pinned_libtpu_mismatch_is_refused_in_one_line() -> None:
    with pytest.raises(BackendUnavailable) as exc:
        TPUBackend().fingerprint({**BASE, "libtpu_version": "0.0.20"})
    assert str(exc.value) == "tpu: config pins libtpu 0.0.20 but 0.0.24 is installed"
    assert (exc.value.backend, exc.value.reason) == ("tpu", "config pins libtpu 0.0.20 but 0.0.24 is installed")

@pytest.mark.parametrize(("mode", "defer"), [("eager", "0"), ("defer_and_fuse", "1"), ("full", "0")])
def test_build_command_sets_the_eager_mode_the_entry_names(mode: str, defer: str, tmp_path: Path) -> None:
    cmd = TPUBackend().build_command(_job(tmp_path, mode))
    assert cmd.argv[1:3] == ["-m", "cachekeeper.backends.tpu.build"]
    assert cmd.env["TORCH_TPU_DEFER_AND_FUSE"] == defer
    assert cmd.env["XLA_FLAGS"] == "--a=1" and cmd.env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"


def test_a_tensor_parallel_build_starts_through_the_packages_launch_helper(tmp_path: Path) -> None:
    """0.2.0's ranks need TORCH_TPU_SLICEBUILDER_ADDRESSES, which only set_tpu_launch_env sets: the launcher
    calls it in the parent, then runs torchrun with the same arguments."""
    argv = TPUBackend().build_command(_job(tmp_path, "full", tp=2)).argv
    assert argv[1:] == ["-m", "cachekeeper.backends.tpu.launch", "--standalone", "--nproc_per_node=2",
                        "-m", "cachekeeper.backends.tpu.build", argv[-1]]


@pytest.mark.parametrize("name", [f"{K}_{K}_{K}", f"{K}_{K}_{K}_g", f"{K}_{K}_{K}_id key.with-dots"])
def test_include_keeps_both_name_forms_and_drops_their_temps(name: str, tmp_path: Path) -> None:
    entry_path = tmp_path / K / f"{name}.bin"
    temp = tmp_path / K / f"{name}.bin.tpu-vm-0-7f3a2b1c-4242-63c1f0e2a3b4.0.tmp"
    for p in (entry_path, temp):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    backend = TPUBackend()
    assert backend.include("cache", f"{K}/{name}.bin", entry_path)
    assert not backend.include("cache", f"{K}/{temp.name}", temp)



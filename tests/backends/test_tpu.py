"""TPUBackend without builds: fingerprint fields and sensitivity, tier-2 guard, pins, include, command.

Versions come from simulated package metadata (tests/simulated); nothing here imports torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cachekeeper.backends.base import BuildJob, ModelRef
from cachekeeper.backends.toolchain import TORCHRUN_LOGS
from cachekeeper.backends.tpu import TPUBackend
from cachekeeper.backends.tpu.probes import PRIVATE_TIER2_PREFIX, remove_private_tier2
from cachekeeper.errors import BackendUnavailable, ConfigError, DestinationError
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
    assert backend.env_exports(tmp_path)["TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"] == str(tmp_path)
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


def test_a_build_replaces_a_host_setting_that_disables_tier2_with_one_warning(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TORCH_TPU_TIER2_COMPILATION_CACHE", "disabled")
    env = TPUBackend().build_command(_job(tmp_path, "eager")).env
    assert env["TORCH_TPU_TIER2_COMPILATION_CACHE"].startswith(PRIVATE_TIER2_PREFIX)
    assert env["TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"] == str(tmp_path / "w" / "cache")
    warning = env["CACHEKEEPER_BUILD_WARNINGS"]
    assert warning.count("\n") == 0 and "TORCH_TPU_TIER2_COMPILATION_CACHE=disabled on this host" in warning


def test_every_build_gets_a_tier2_cache_of_its_own(tmp_path: Path) -> None:
    """A tier-2 hit never writes tier 3 ([dev] compilation_cache.cc): a build sharing the host's tier 2
    (name `default`) would leave graphs another build compiled out of its snapshot."""
    names = {TPUBackend().build_command(_job(tmp_path, "eager")).env["TORCH_TPU_TIER2_COMPILATION_CACHE"]
             for _ in range(3)}
    assert len(names) == 3 and not names & {"default", "disabled", ""}
    assert "CACHEKEEPER_BUILD_WARNINGS" not in TPUBackend().build_command(_job(tmp_path, "eager")).env


def test_the_private_tier2_dir_is_removed_and_a_failure_to_remove_is_one_warning(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    env = {"CACHEKEEPER_TPU_TIER2_BASE": str(shm), "TORCH_TPU_TIER2_COMPILATION_CACHE": "cachekeeper-0123"}
    (shm / "cachekeeper-0123" / K).mkdir(parents=True)
    (shm / "cachekeeper-0123" / K / "x.bin").write_bytes(b"x")
    assert remove_private_tier2(env) is None and not (shm / "cachekeeper-0123").exists()
    assert remove_private_tier2(env) is None                     # already gone: nothing to say
    (shm / "cachekeeper-0123").write_bytes(b"not a dir")          # rmtree fails on it, as on a busy mount
    warning = remove_private_tier2(env)
    assert warning is not None and warning.startswith(f"tpu: cannot remove the build's private tier-2 cache {shm}")
    user = {**env, "TORCH_TPU_TIER2_COMPILATION_CACHE": "default"}
    (shm / "default").mkdir()
    assert remove_private_tier2(user) is None and (shm / "default").is_dir()   # never a name we did not make


def test_boot_env_turns_backup_compilation_off_and_refuses_a_read_only_dest(tmp_path: Path) -> None:
    exports = TPUBackend().env_exports(tmp_path / "hydrated")   # not there yet: its parent must be writable
    assert exports["TORCH_TPU_INTERNAL_TIER3_COMPILATION_CACHE_LOCAL_BACKUP_TASK"] == "0"
    with pytest.raises(DestinationError) as exc:
        TPUBackend().env_exports(Path("/proc/self/ck-hydrated"))   # no process, root included, creates dirs there
    assert exc.value.message.startswith("tpu: /proc/self/ck-hydrated is not writable (")
    assert "\n" not in exc.value.message


def test_a_slot_sets_tpu_visible_devices_with_tpu_visible_chips() -> None:
    """[dev] environment.cc, InitializeSingleDeviceEnvironment rewrites TPU_VISIBLE_CHIPS from
    TPU_VISIBLE_DEVICES (default "0"): a slot that set only the first would run on chip 0."""
    env = TPUBackend().device_env([3])
    assert env["TPU_VISIBLE_DEVICES"] == env["TPU_VISIBLE_CHIPS"] == "3"


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
                        f"--log-dir={tmp_path / 'w' / TORCHRUN_LOGS}", "-m", "cachekeeper.backends.tpu.build", argv[-1]]


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




def test_cachekeeper_env_refuses_a_read_only_dest_in_one_line() -> None:
    from click.testing import CliRunner

    from cachekeeper.cli import _register, cli

    _register()
    result = CliRunner().invoke(cli, ["env", "--backend", "tpu", "--dest", "/proc/self/ck-hydrated"])
    assert result.exit_code == 9, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: tpu: /proc/self/ck-hydrated")
    assert "is not writable" in lines[0] and lines[1].startswith("hint: ")


def test_a_chip_option_on_another_chip_family_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v6e-8")
    job = BuildJob(entry("tpu", "full"), ModelRef("m", "transformer", path=str(tmp_path / "m")),
                   {"cache": str(tmp_path / "w" / "cache")}, {"chip": "v7x"}, str(tmp_path / "r.json"))
    with pytest.raises(BackendUnavailable) as exc:
        TPUBackend().build_command(job)
    assert str(exc.value) == ("tpu: the build's chip is v7x but this host is v6e: its executables would be "
                              "published under a v7x fingerprint")
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v7x-8")
    assert TPUBackend().build_command(job).argv   # the same job on a v7x host builds

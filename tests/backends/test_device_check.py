"""`cachekeeper doctor --device-check` on the simulated devices (tests/simulated): prebuild a tiny entry into a
temp store, hydrate it into a fresh dir, serve it in a fresh process, and judge by the runtime's counters.
On real hardware the same command is how a row of docs/backends.md's assumption tables turns to "verified".
Each check runs three subprocesses (tiny model, build, server): 20-40 s on 2 cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachekeeper.cli import _register, cli
from tests.simulated.harness import clear_device_env, install

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    clear_device_env(monkeypatch)
    monkeypatch.setenv("CACHEKEEPER_TPU_CHIP_LOCK", str(tmp_path / "chips.lock"))
    return install(monkeypatch, tmp_path / "site")


_register()


def check(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["doctor", "--device-check", *args])
    return result.exit_code, result.stdout, result.stderr


def test_tpu_a_fresh_server_on_the_hydrated_dir_compiles_nothing_by_the_runtimes_own_counters() -> None:
    code, out, err = check("--backend", "tpu", "--json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["counters_source"] == "runtime" and report["ok"] is True
    assert report["served"]["compiled"] == 0
    assert report["served"]["loaded"] == report["prebuild"]["compiled"] == report["published"] > 0


def test_tpu_a_server_whose_placement_changes_the_key_fails_the_check() -> None:
    """A server that sees chip 3 without a slice of its own addresses it by host index (simulated 0.2.0):
    the device assignment in the compile-options key differs, so it compiles on a full cache."""
    code, out, err = check("--backend", "tpu", "--serve-env", "TPU_VISIBLE_CHIPS=3")
    assert code == 6, out + err
    assert "server on the hydrated dir: compiled " in out and "compiled 0," not in out.splitlines()[-1]
    assert err.startswith("error: device check: a fresh tpu server on the hydrated dir compiled ")
    assert "\nhint: " in err


def test_neuron_counts_the_neffs_the_server_added() -> None:
    code, out, err = check("--backend", "neuron", "--mode", "eager")
    assert code == 0, out + err
    assert "server on the hydrated dir: compiled 0" in out and "ok: the server compiled nothing" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--device-check"], "--device-check checks one backend: name it with --backend"),
    (["--device-check", "--backend", "tpu", "--serve-env", "NOEQUALS"], "--serve-env: expected VAR=VALUE"),
    (["--device-check", "--backend", "tpu", "--mode", "aot"], "--mode: tpu has no mode 'aot'"),
    (["--serve-env", "A=1"], "--model and --serve-env belong to --device-check"),
])
def test_bad_device_check_flags_are_one_error_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["doctor", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {message}") and result.stderr.count("\n") == 2

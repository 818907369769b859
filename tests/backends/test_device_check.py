"""`cachekeeper doctor --device-check` on the simulated devices (tests/simulated): prebuild a tiny entry into a
temp store, hydrate it into a fresh dir, serve it in a fresh process, and judge by the runtime's own counters
(TorchTPU: per-entry compilation durations; Neuron: metrics), the files the server wrote, and one verdict row
per hardware-only fact of docs/backends.md. Each check runs 3-4 subprocesses: 20-60 s on 2 cores."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachekeeper.admin.device_check import FACTS
from cachekeeper.cli import _register, cli
from tests.simulated import REPO
from tests.simulated.harness import clear_device_env, install, tier2_dirs

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    clear_device_env(monkeypatch)
    monkeypatch.setenv("CACHEKEEPER_TPU_CHIP_LOCK", str(tmp_path / "chips.lock"))
    return install(monkeypatch, tmp_path / "site")


@pytest.fixture()
def tiny_model(tiny_flux_models: Path) -> str:
    """`--model`: the run's shared tiny Flux transformer (the same config as the check's own model, which only
    the first TPU check builds: the others skip that subprocess). The check only reads it."""
    return str(tiny_flux_models / "tiny-flux")


_register()


def check(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["doctor", "--device-check", *args])
    return result.exit_code, result.stdout, result.stderr


def verdicts(report: dict) -> dict[str, str]:
    return {r["fact"]: r["verdict"] for r in report["rows"]}


def test_tpu_a_fresh_server_on_the_hydrated_dir_compiles_nothing_by_its_own_stats_and_files(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_VISIBLE_CHIPS", "0,1")   # a 2-chip host: the prebuild runs in chip 1's slot
    code, out, err = check("--backend", "tpu", "--json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["counters_source"] == "runtime" and report["ok"] is True
    served = report["served"]
    assert served["compiled"] == 0 and report["served_files"]["added"] == report["served_files"]["changed"] == 0
    assert served["loaded"] == report["prebuild"]["compiled"] == report["published"] > 0
    # Why `compiled` is not the runtime's miss counter: it counts tier 1 only, so every first use is a "miss".
    assert served["tier1_misses"] == served["loaded"]
    assert sorted(r["fact"] for r in report["rows"]) == sorted(FACTS["tpu"])   # one row per fact
    assert verdicts(report) == {
        "tpu.reads-tier3": "pass", "tpu.stats-counters": "pass", "tpu.platform-dir": "pass",
        "tpu.private-tier2": "pass", "tpu.slot-chip0": "pass", "tpu.backup-off": "pass",
        "tpu.scalar-steps": "not checked"}
    assert tier2_dirs() == []   # the build's and the server's private tier-2 caches are gone


def test_tpu_a_server_whose_placement_changes_the_key_fails_the_check_in_one_verdict_table(
        monkeypatch: pytest.MonkeyPatch, tiny_model: str) -> None:
    """A server that sees chip 3 without a slice of its own addresses it by host index (simulated 0.2.0):
    the device assignment in the compile-options key differs, so it compiles on a full cache. The text
    output ends in one table, a header and one row per fact; the error is on stderr."""
    monkeypatch.setenv("TPU_VISIBLE_CHIPS", "0")   # one chip
    code, out, err = check("--backend", "tpu", "--serve-env", "TPU_VISIBLE_CHIPS=3", "--model", tiny_model)
    assert code == 6, out + err
    assert "server on the hydrated dir: compiled " in out and "compiled 0," not in out.splitlines()[2]
    table = out[out.index("  fact "):].splitlines()
    assert table[0].split() == ["fact", "verdict", "detail"] and len(table) == 1 + len(FACTS["tpu"])
    assert re.search(r"tpu\.reads-tier3 +fail", out)
    assert re.search(r"tpu\.slot-chip0 +not checked +fewer than 2 chips", out)
    assert err.startswith("error: device check: a fresh tpu server on the hydrated dir compiled ")
    assert err.count("\n") == 2 and "\nhint: " in err


def test_neuron_counts_by_metrics_and_checks_target_lnc_and_the_two_rank_neff_count(
        monkeypatch: pytest.MonkeyPatch, tiny_model: str) -> None:
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-1")          # 2 cores: the 2-rank row runs
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")  # the fingerprint's target (the device's too)
    code, out, err = check("--backend", "neuron", "--mode", "eager", "--json", "--model", tiny_model)
    assert code == 0, out + err
    report = json.loads(out)
    assert report["served"]["compiled"] == 0 and report["served"]["loaded"] == report["published"] > 10
    assert verdicts(report) == {
        "neuron.reads-neffs": "pass", "neuron.metrics-counters": "pass", "neuron.target-lnc": "pass",
        "neuron.tp-one-neff": "pass", "neuron.python-layout": "not checked", "neuron.scalar-steps": "not checked"}


def test_a_host_without_the_device_is_one_error_line_and_exit_6() -> None:
    code, out, err = check("--backend", "tpu")   # the simulated package, no chip visible
    assert code == 6 and out == ""
    assert err.splitlines() == [
        "error: tpu: cannot run the device check here: no TPU chip on this host: torch_tpu counts Google PCI "
        "devices (vendor 0x1ae0) with a /dev/vfio group, and registers its 'tpu' device only when it finds one",
        "hint: run it on the tpu host that serves (hydrate needs no device; the check does)"]


@pytest.mark.parametrize("backend", ["tpu", "neuron"])
def test_a_host_without_the_device_package_is_one_error_line_and_exit_6(backend: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "cachekeeper", "doctor", "--device-check", "--backend", backend],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 6, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and "Traceback" not in proc.stderr
    assert lines[0].startswith(f"error: {backend}: cannot run the device check here: ")
    assert "not installed" in lines[0] and lines[1].startswith("hint: ")


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


def test_every_hardware_only_fact_in_the_docs_has_a_device_check_row() -> None:
    """docs/backends.md names the row that confirms each fact; every such row exists, and every row is named."""
    docs = (REPO / "docs" / "backends.md").read_text()
    named = set(re.findall(r"`((?:tpu|neuron)\.[a-z0-9-]+)`", docs))
    rows = {fact for facts in FACTS.values() for fact in facts}
    assert named == rows


def test_neuron_a_target_the_device_does_not_have_stops_the_check_in_one_line(
        monkeypatch: pytest.MonkeyPatch, tiny_model: str) -> None:
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0")
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")   # the simulated device is trn2
    code, out, err = check("--backend", "neuron", "--model", tiny_model)
    assert code == 7, out + err
    assert err.splitlines()[0] == (
        "error: device check: the build failed (exit 1): neuron: the build's target is trn3 but the runtime "
        "compiles for trn2 (torch_neuronx.utils.get_platform_target()): the NEFFs would be published under the "
        "wrong target")
    assert len(err.splitlines()) == 2 and "Traceback" not in err


def test_eager_keys_that_depend_on_the_step_count_fail_their_row_and_warmup_steps_covers_them(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_pipelines: Path) -> None:
    """The server runs 3 steps, the build 2: the simulated TorchTPU keys eager ops on their scalar arguments
    ([dev] cache_key.h), and the scheduler indexes its sigmas by step. Listing the server's step counts in
    `warmup_steps` makes the build run them too."""
    monkeypatch.setenv("TPU_VISIBLE_CHIPS", "0")
    model = tiny_pipelines / "tiny-flux2-klein"   # the run's shared tiny pipeline; the check only reads it
    code, out, err = check("--backend", "tpu", "--mode", "eager", "--model", str(model))
    assert code == 6, out + err
    assert re.search(r"tpu\.scalar-steps +fail +eager keys depend on num_inference_steps here: list your server's "
                     r"step counts in backend_options\.tpu\.warmup_steps", out)
    config = tmp_path / "ck.yaml"
    config.write_text("version: 1\nbackend_options:\n  tpu: {warmup_steps: '2,3'}\nmodels:\n"
                      "  - {name: m, path: ./m, backends: [tpu], shapes: ['64x64']}\n")
    code, out, err = check("--backend", "tpu", "--mode", "eager", "--model", str(model), "--config", str(config))
    assert code == 0, out + err
    assert re.search(r"tpu\.scalar-steps +pass", out)

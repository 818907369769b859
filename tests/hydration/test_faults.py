"""Hydrate through a store that misbehaves: a fault-injecting proxy on loopback in front of the real
SeaweedFS and fake-gcs-server (tests/harness/faultproxy.py). With 10 % faults every hydrate succeeds;
with 100 % faults of any one kind it fails in one line within its deadline; a body cut mid-way is
resumed from the byte where it broke (a ranged request), not fetched again from the start."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.errors import HydrateIncomplete, StoreError
from cachekeeper.stores import open_store
from tests.harness.fakegcs import GCSServer
from tests.harness.faultproxy import KINDS, FaultProxy, fault_proxy
from tests.harness.seaweedfs import S3Server

from .helpers import build_tree, hydrate_into, publish_tree, read_tree, write_tree

pytestmark = pytest.mark.services
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Backend:
    """A published cache in a real store, and how to point the store client at a proxy."""

    url: str
    upstream: str
    env_var: str
    files: dict[str, bytes]
    name: str

    def through(self, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch) -> Callable[[], object]:
        monkeypatch.setenv(self.env_var, proxy.url)
        return lambda: open_store(self.url)


@pytest.fixture(params=["s3", "gcs"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    monkeypatch.setenv("CACHEKEEPER_STALL_TIMEOUT", "0.5")  # a stalled attempt is abandoned quickly here
    if request.param == "s3":
        url = request.getfixturevalue("s3_store_url")
        server: S3Server = request.getfixturevalue("s3_server")
        upstream, env_var = server.endpoint_url, "AWS_ENDPOINT_URL"
    else:
        url = request.getfixturevalue("gcs_store_url")
        gcs: GCSServer = request.getfixturevalue("gcs_server")
        upstream, env_var = gcs.url, "STORAGE_EMULATOR_HOST"
    files = build_tree()
    m = publish_tree(open_store(url), write_tree(tmp_path / "build", files), monkeypatch)
    yield Backend(url, upstream, env_var, files, m.name)


def test_with_ten_percent_faults_of_every_kind_every_hydrate_succeeds(
        backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    retries = 0
    with fault_proxy(backend.upstream, rate=0.1, seed=10) as proxy:
        opener = backend.through(proxy, monkeypatch)
        for i in range(5):
            report = hydrate_into(opener, tmp_path / f"d{i}", [backend.name], deadline=60)
            assert read_tree(tmp_path / f"d{i}") == backend.files and not report.incomplete
            retries += report.retries
    assert set(proxy.injected) == set(KINDS), proxy.injected  # every kind really happened
    ours = [s for s in proxy.seen if s.fault != "pass" and _object_read(s.path)]
    assert ours and retries >= len(ours)  # each fault on a read of ours was retried (listings: the SDK's)


def _object_read(path: str) -> bool:
    """A GET of one object (S3 presigned, GCS media), not a listing the SDK retries by itself."""
    return "X-Amz-Signature=" in path or "/download/storage/" in path


def test_with_every_request_failing_each_kind_fails_in_one_line_within_the_deadline(
        backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for kind in KINDS:
        with fault_proxy(backend.upstream, rate=1.0, kinds=(kind,)) as proxy:
            opener = backend.through(proxy, monkeypatch)
            t0 = time.monotonic()
            with pytest.raises((HydrateIncomplete, StoreError)) as info:
                hydrate_into(opener, tmp_path / kind, [backend.name], deadline=1.0)
            elapsed = time.monotonic() - t0
        assert "\n" not in info.value.message and proxy.injected[kind] >= 1
        assert elapsed < 1.0 + 1.5, f"{kind}: {elapsed:.1f}s past a 1s deadline"


def test_a_body_cut_midway_is_resumed_from_the_byte_where_it_broke(
        backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with fault_proxy(backend.upstream, first=1, kinds=("reset_mid",), match="blobs") as proxy:
        report = hydrate_into(backend.through(proxy, monkeypatch), tmp_path / "d", [backend.name])
    assert read_tree(tmp_path / "d") == backend.files and report.retries == 1
    cut = next(s for s in proxy.seen if s.fault == "reset_mid")
    again = [s for s in proxy.seen if s.path.split("?")[0] == cut.path.split("?")[0] and s.fault == "pass"]
    assert len(again) == 1 and again[0].range is not None
    resumed_at = int(again[0].range.removeprefix("bytes=").split("-")[0])
    first_byte = int(cut.range.removeprefix("bytes=").split("-")[0]) if cut.range else 0
    assert resumed_at > first_byte, (cut.range, again[0].range)  # not from the start again


def _cli(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    from tests.fakes import ENABLE

    return subprocess.run([sys.executable, "-m", "cachekeeper", "hydrate", "--backend", "fake", *args],
                          capture_output=True, text=True, timeout=60, cwd=tmp,
                          env={**os.environ, **ENABLE, "PYTHONPATH": str(REPO), "FAKE_SHARED_DIR": str(tmp / "sh"),
                               "CACHEKEEPER_HOME": str(tmp / "home"), **env})


@pytest.mark.parametrize("best_effort", [False, True], ids=["strict", "best-effort"])
def test_the_boot_hook_against_a_stalled_store_ends_at_its_deadline(
        s3_store_url: str, s3_server: S3Server, best_effort: bool, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    publish_tree(open_store(s3_store_url), write_tree(tmp_path / "build", build_tree(4, 2)), monkeypatch)
    with fault_proxy(s3_server.endpoint_url, rate=1.0, kinds=("stall",)) as proxy:
        t0 = time.monotonic()
        proc = _cli(tmp_path, "--store", s3_store_url, "--dest", str(tmp_path / "d"), "--deadline", "1.5",
                    "--print-env", *(["--best-effort"] if best_effort else []), AWS_ENDPOINT_URL=proxy.url)
        elapsed = time.monotonic() - t0
    assert "Traceback" not in proc.stderr and elapsed < 1.5 + 4, (elapsed, proc.stderr)
    if best_effort:  # the server starts (env printed) and compiles what is missing
        assert proc.returncode == 0 and "export FAKE_CACHE_DIR=" in proc.stdout, proc.stderr
        assert next(ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")).count("deadline") == 1
    else:
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert proc.returncode == 11 and len(errors) == 1 and "deadline" in errors[0], proc.stderr
        assert proc.stdout == ""


# --- no --deadline: the stall timeout bounds every read, the SDK's included -----------------------------

STALL = 1.0    # CACHEKEEPER_STALL_TIMEOUT for these runs
BOUND = 3 * STALL + 3.0   # docs/cli.md, docs/durability.md: 3 stall timeouts, plus connect timeouts and backoff


def _stalled_cli(tmp: Path, store_url: str, env_var: str, proxy: FaultProxy, *extra: str) -> tuple[float, Any]:
    t0 = time.monotonic()
    proc = _cli(tmp, "--store", store_url, "--dest", str(tmp / "d"), "--print-env", *extra,
                **{env_var: proxy.url, "CACHEKEEPER_STALL_TIMEOUT": str(STALL)})
    return time.monotonic() - t0, proc


@pytest.mark.parametrize("what", ["every request", "object reads"])
@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_without_a_deadline_a_stalled_store_ends_within_a_few_stall_timeouts(
        kind: str, what: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if kind == "s3":
        url = request.getfixturevalue("s3_store_url")
        upstream, env_var, reads = request.getfixturevalue("s3_server").endpoint_url, "AWS_ENDPOINT_URL", "X-Amz-"
    else:
        url = request.getfixturevalue("gcs_store_url")
        upstream, env_var, reads = request.getfixturevalue("gcs_server").url, "STORAGE_EMULATOR_HOST", "/download/"
    publish_tree(open_store(url), write_tree(tmp_path / "build", build_tree(4, 2)), monkeypatch)
    # "every request": listings and HEADs go through the SDK (its own read timeout and retries);
    # "object reads": the listing answers, then every manifest GET hangs (our ranged reads).
    match = "" if what == "every request" else reads
    for best_effort in (False, True):
        with fault_proxy(upstream, rate=1.0, kinds=("stall",), match=match) as proxy:
            elapsed, proc = _stalled_cli(tmp_path, url, env_var, proxy, *(["--best-effort"] if best_effort else []))
        assert proxy.injected["stall"] >= 1
        assert "Traceback" not in proc.stderr and elapsed < BOUND, (elapsed, proc.stderr)
        if best_effort:
            assert proc.returncode == 0 and "export FAKE_CACHE_DIR=" in proc.stdout, proc.stderr
        else:
            errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
            assert proc.returncode in (3, 11) and len(errors) == 1, proc.stderr


def test_a_hydrate_terminated_while_the_store_stalls_leaves_no_claim(
        s3_store_url: str, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from tests.fakes import ENABLE

    publish_tree(open_store(s3_store_url), write_tree(tmp_path / "build", build_tree(4, 2)), monkeypatch)
    dest = tmp_path / "d"
    with fault_proxy(s3_server.endpoint_url, rate=1.0, kinds=("stall",), match="blobs") as proxy:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cachekeeper", "hydrate", "--backend", "fake", "--store", s3_store_url,
             "--dest", str(dest)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
            env={**os.environ, **ENABLE, "PYTHONPATH": str(REPO), "FAKE_SHARED_DIR": str(tmp_path / "sh"),
                 "CACHEKEEPER_HOME": str(tmp_path / "home"), "AWS_ENDPOINT_URL": proxy.url})
        t0 = time.monotonic()
        while not proxy.injected["stall"]:   # the manifests are read; the first blob GET hangs
            assert time.monotonic() - t0 < 30 and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    # before: killed by the signal (-15) mid-way, its state.json claiming the dir for this toolchain
    assert proc.returncode == 143 and len(errors) == 1 and "SIGTERM" in errors[0], stderr
    assert any(ln.startswith("hint: ") for ln in stderr.splitlines()) and "Traceback" not in stderr
    assert list(dest.rglob("state.json")) == [] and not [p for p in dest.rglob("*") if p.is_file()
                                                        and ".cachekeeper" not in p.parts]

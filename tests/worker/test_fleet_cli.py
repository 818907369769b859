"""Prebuild at fleet scale through the real command, with the fake backend (a real subprocess build that
writes files and records what it saw: tests/worker/fleet.py). SQLite catalog, file store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli_env import config_text, one_error_line
from tests.worker.fleet import ENABLE

REPO = Path(__file__).resolve().parents[2]
FOUR_SHAPES = "height: [64, 128, 192, 256]"


class Fleet:
    def __init__(self, tmp: Path, shapes: str = "height: [64, 128]", build: str = "") -> None:
        self.tmp = tmp
        self.model = tmp / "model"
        self.model.mkdir()
        self.config = tmp / "ck.yaml"
        self.config.write_text(config_text(self.model, build=build).replace("height: [64, 128]", shapes))
        self.log = tmp / "log"
        self.log.mkdir()
        self.workdirs = tmp / "workdirs"   # TMPDIR of the workers: where their ck-build-* dirs go
        self.workdirs.mkdir()
        self.vars = {**os.environ, **ENABLE, "CACHEKEEPER_HOME": str(tmp / "home"), "FLEET_LOG": str(self.log),
                     "FAKE_SHARED_DIR": str(tmp / "shared"), "PYTHONPATH": str(REPO), "TMPDIR": str(self.workdirs),
                     "FAKE_LARGE_BYTES": "4096"}
        for var in ("CACHEKEEPER_STORE", "CACHEKEEPER_CATALOG", "JOB_COMPLETION_INDEX", "AWS_BATCH_JOB_ARRAY_INDEX"):
            self.vars.pop(var, None)

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cachekeeper", *args]

    def run(self, *args: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self.argv(*args), capture_output=True, text=True, env={**self.vars, **env},
                              cwd=self.tmp, timeout=120)
        assert "Traceback" not in proc.stderr, proc.stderr
        if ok:
            assert proc.returncode == 0, proc.stderr
        return proc

    def start(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(*args), env={**self.vars, **env}, cwd=self.tmp, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def records(self, suffix: str) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.log.glob(f"*.{suffix}"))]

    def wait_for(self, suffix: str, n: int = 1, timeout: float = 30) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(found := self.records(suffix)) < n:
            assert time.monotonic() < deadline, f"no {n} build {suffix} records in {timeout}s"
            time.sleep(0.05)
        return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose (its parent has not reaped it yet).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path)


# --- dead workers ------------------------------------------------------------------------------------


def test_a_killed_worker_takes_its_build_along_and_its_entry_is_built_by_the_next_worker(fleet: Fleet) -> None:
    fleet.run("db", "upgrade")
    # A lease far longer than the test: only the dead-process check can free the entry this soon.
    lease = ("--lease", "600", "--heartbeat", "1")
    victim = fleet.start("prebuild", str(fleet.config), *lease, "--worker", "victim", FAKE_BUILD_SLEEP="60")
    [started] = fleet.wait_for("start")
    assert list(fleet.workdirs.glob("ck-build-*")), "the build runs in a workdir under TMPDIR"
    victim.send_signal(signal.SIGKILL)
    victim.wait()

    # The build and the compiler-like child it spawned die with the worker (within a second or two).
    assert gone_within([int(str(started["pid"])), int(str(started["child"]))], 5)

    # A rerun at once on the same host: the holder's process is gone, so its claim is dead although its
    # lease runs for ten more minutes; the entry is built here, the dead worker's workdir swept.
    done = fleet.run("prebuild", str(fleet.config), *lease, "--json")
    counts = json.loads(done.stdout)["counts"]
    assert counts == {"built": 2}, counts
    assert not list(fleet.workdirs.glob("ck-build-*")), "the dead worker's workdir was swept"
    fleet.run("coverage", str(fleet.config))


@pytest.mark.parametrize(("sig", "code", "word"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT")])
def test_an_interrupted_worker_releases_its_claims_and_the_next_run_builds_them(
        fleet: Fleet, sig: signal.Signals, code: int, word: str) -> None:
    fleet.run("db", "upgrade")
    lease = ("--lease", "600", "--heartbeat", "1")   # the lease cannot be what frees the entries
    victim = fleet.start("prebuild", str(fleet.config), *lease, "--workers", "2", FAKE_BUILD_SLEEP="60")
    started = fleet.wait_for("start", 2)
    victim.send_signal(sig)
    _, stderr = victim.communicate(timeout=30)

    assert victim.returncode == code, stderr
    assert "Traceback" not in stderr
    [error] = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    assert word in error
    assert any(ln.startswith("hint: ") and "rerun" in ln for ln in stderr.splitlines()), stderr
    assert gone_within([int(str(r[k])) for r in started for k in ("pid", "child")], 5)

    # The very next run on this host builds both entries (before: exit 13, "still being built by other
    # workers ... live leases", for the interrupted run's own claims).
    done = fleet.run("prebuild", str(fleet.config), *lease, "--json")
    assert json.loads(done.stdout)["counts"] == {"built": 2}


def test_a_worker_without_catalog_also_takes_its_build_along(fleet: Fleet) -> None:
    victim = fleet.start("prebuild", str(fleet.config), "--no-catalog", FAKE_BUILD_SLEEP="60")
    [started] = fleet.wait_for("start")
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert gone_within([int(str(started["pid"])), int(str(started["child"]))], 5)
    swept = fleet.run("prebuild", str(fleet.config), "--no-catalog", "--json")
    assert len(json.loads(swept.stdout)["swept_workdirs"]) == 1


def test_a_lease_not_longer_than_the_heartbeat_is_one_line(fleet: Fleet) -> None:
    proc = fleet.run("prebuild", str(fleet.config), "--lease", "5", "--heartbeat", "10", ok=False)
    assert proc.returncode == 2
    assert "the lease (5 s) is not longer than the heartbeat (10 s)" in one_error_line(proc)


def test_a_queue_job_of_another_payload_version_is_refused_with_one_line(fleet: Fleet) -> None:
    from cachekeeper.catalog import Catalog

    fleet.run("prebuild", str(fleet.config))
    url = f"sqlite:///{fleet.tmp / 'home' / 'catalog.db'}"
    with Catalog.open(url) as catalog:
        [fp] = {j.fingerprint_id for j in catalog.jobs()}
        catalog.enqueue([(fp, "f" * 32, json.dumps({"spec": {"model": "old"}, "model": {"name": "old"}}))])
    proc = fleet.run("prebuild", str(fleet.config), ok=False)
    assert proc.returncode == 5
    assert "payload version 1, written by an older cachekeeper; this worker reads version 3" in one_error_line(proc)
    with Catalog.open(url) as catalog:
        [job] = catalog.jobs(status="pending")
        assert job.entry_key == "f" * 32   # left for a worker that reads it


# --- catalog first -----------------------------------------------------------------------------------


def test_with_a_catalog_a_built_entry_costs_no_store_request(fleet: Fleet) -> None:
    fleet.run("prebuild", str(fleet.config))
    store = fleet.tmp / "home" / "store"
    store.rename(fleet.tmp / "elsewhere")   # the store is now empty: only the catalog can say "built"

    again = fleet.run("prebuild", str(fleet.config), "--json")
    assert json.loads(again.stdout)["counts"] == {"present": 2}
    assert not (store / "manifests").exists()

    verified = fleet.run("prebuild", str(fleet.config), "--verify-store", "--json")
    assert json.loads(verified.stdout)["counts"] == {"built": 2}


# --- build.workers -----------------------------------------------------------------------------------


def test_build_workers_run_in_parallel_each_on_its_own_devices(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, FOUR_SHAPES, build="build: {workers: 2}")
    fleet.run("prebuild", str(fleet.config), FAKE_BUILD_SLEEP="1", FLEET_DEVICES="4")
    ends = fleet.records("end")
    assert len(ends) == 4
    assert sorted({str(r["visible"]) for r in ends}) == ["0,1", "2,3"]
    overlapping = sum(1 for a in ends for b in ends if a is not b and a["start"] < b["end"] and b["start"] < a["end"])
    assert overlapping >= 2, "at least two builds ran at the same time"


def test_more_build_workers_than_devices_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, build="build: {workers: 8}")
    proc = fleet.run("prebuild", str(fleet.config), ok=False, FLEET_DEVICES="4")
    assert proc.returncode == 2
    assert "build.workers is 8 but backend fake sees 4 fake cores" in one_error_line(proc)


# --- shards ------------------------------------------------------------------------------------------


def test_shards_from_the_engine_index_split_the_matrix_without_overlap(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, FOUR_SHAPES)
    argv = ("prebuild", str(fleet.config), "--no-catalog", "--shard", "2", "--json")
    outs = [json.loads(fleet.run(*argv, JOB_COMPLETION_INDEX="0").stdout),        # a Kubernetes Indexed Job pod
            json.loads(fleet.run(*argv, AWS_BATCH_JOB_ARRAY_INDEX="1").stdout)]  # an AWS Batch array child
    built = [[o["key"] for o in out["outcomes"] if o["status"] == "built"] for out in outs]
    assert len(built[0]) == len(built[1]) == 2 and not set(built[0]) & set(built[1])


def test_a_shard_index_out_of_range_is_one_line(fleet: Fleet) -> None:
    proc = fleet.run("prebuild", str(fleet.config), "--shard", "4", ok=False, JOB_COMPLETION_INDEX="4")
    assert proc.returncode == 2
    assert "JOB_COMPLETION_INDEX=4: shard index 4 is out of range 0..3" in one_error_line(proc)


# --- store debris ------------------------------------------------------------------------------------


def test_gc_plans_then_removes_the_temp_file_of_a_publisher_killed_mid_write(fleet: Fleet) -> None:
    fleet.run("prebuild", str(fleet.config))
    tmp = fleet.tmp / "home" / "store" / "blobs" / "sha256" / "ab" / ".abcd.4242.17.ck-tmp"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_bytes(b"half a blob")
    assert "ck-tmp" not in fleet.run("gc").stdout               # young: a publish may still be writing it
    plan = fleet.run("gc", "--min-age", "0")
    assert "would delete  blobs/sha256/ab/.abcd.4242.17.ck-tmp" in plan.stdout and tmp.exists()
    fleet.run("gc", "--min-age", "0", "--run")
    assert not tmp.exists()
    fleet.run("verify", "--deep")


@pytest.mark.services
def test_a_shared_catalog_on_an_older_schema_is_one_line_naming_it(fleet: Fleet, postgres_schema_url: str) -> None:
    fleet.run("db", "upgrade", "0002", "--catalog", postgres_schema_url)   # as an older release left it
    proc = fleet.run("prebuild", str(fleet.config), "--catalog", postgres_schema_url, ok=False)
    assert proc.returncode == 5
    assert "is at revision 0002, expected" in one_error_line(proc) and "db upgrade" in proc.stderr

"""`cachekeeper capture` through the real command: what it lists, what it publishes, what it refuses.

Fake backend and a file store (a few seconds in all); the Inductor and simulated-Neuron loops are in
tests/test_inductor_loop.py and tests/capture/test_neuron_eager.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cachekeeper.publish.upload import publish
from cachekeeper.stores import open_store
from tests.fakes import FakeBackend, served
from tests.harness.seaweedfs import S3Server

from .conftest import World, one_error, runtime_writes


def test_capture_lists_only_complete_files_the_runtime_added(world: World) -> None:
    dest = world.tmp / "d1"
    dest = world.served(dest)
    runtime_writes(dest, "new/a.neff", b"compiled at runtime")
    (dest / "new" / ".b.neff.99.tmp").write_bytes(b"half")          # a runtime temp, not yet renamed
    (dest / "new" / "b.lock").write_bytes(b"")                     # the backend's include() drops locks
    os.utime(dest / "00" / "k0.neff")                              # the runtime touched a placed file
    (dest / "link.neff").symlink_to("/etc/hostname")               # never followed, never published

    proc = world.capture(dest)
    assert proc.stdout.splitlines() == ["new/a.neff"]
    listed = json.loads(world.capture(dest, "--json").stdout)["counts"]
    assert (listed["missed"], listed["captured"], listed["refused"]) == (1, 0, 1)
    assert "refused symlink" in proc.stderr and str(dest / "link.neff") in proc.stderr
    assert world.captured_keys() == [], "without --publish nothing is written"


def test_a_published_set_is_hydrated_by_the_next_host_and_is_not_captured_twice(world: World) -> None:
    d1, d2 = world.tmp / "d1", world.tmp / "d2"
    d1 = world.served(d1)
    runtime_writes(d1, "new/a.neff", b"shape B graph")
    report = json.loads(world.capture(d1, "--publish", "--json").stdout)
    assert report["files"] == ["new/a.neff"] and report["created"] is True
    assert {k: report["counts"][k] for k in ("hit", "missed", "captured")} == {"hit": 3, "missed": 1, "captured": 1}

    [key] = world.captured_keys()
    doc = json.loads((world.store_dir / key).read_text())
    assert doc["kind"] == "captured" and doc["schema"] == 2 and doc["name"] == report["manifest"]
    assert set(doc["provenance"]) == {"host", "time", "state", "extends"}
    assert doc["provenance"]["extends"] == [world.spec.key]

    hydrated = world.hydrate(d2)
    d2 = Path(str(hydrated["dest"]))
    assert report["manifest"] in hydrated["manifests"]  # type: ignore[operator]
    assert (d2 / "new" / "a.neff").read_bytes() == b"shape B graph"
    assert world.capture(d2).stdout == "", "what hydrate placed is never captured again"
    again = world.capture(d1, "--publish", "--json")
    assert json.loads(again.stdout)["files"] == [] and world.captured_keys() == [key]


def test_hosts_that_capture_the_same_new_graph_converge_on_the_first_publish(world: World) -> None:
    hosts = [world.tmp / "h1", world.tmp / "h2"]
    for i, dest in enumerate(hosts):
        runtime_writes(world.served(dest), "new/g.neff", f"bytes from host {i}".encode())  # same path, other bytes
    first = json.loads(world.capture(hosts[0], "--publish", "--json").stdout)
    second = json.loads(world.capture(hosts[1], "--publish", "--json").stdout)
    assert first["manifest"] == second["manifest"] and first["created"] and not second["created"]
    assert len(world.captured_keys()) == 1
    assert (world.served(world.tmp / "h3") / "new" / "g.neff").read_bytes() == b"bytes from host 0"


def test_a_dest_that_was_never_hydrated_is_refused(world: World) -> None:
    (world.tmp / "empty").mkdir()
    for dest in (world.tmp / "empty", world.tmp / "absent"):
        proc = world.capture(dest, "--publish", ok=False)
        assert proc.returncode == 12 and "was never hydrated" in one_error(proc)


def test_a_dest_hydrated_for_another_toolchain_is_refused(world: World) -> None:
    dest = world.tmp / "d1"
    dest = world.served(dest)
    runtime_writes(dest, "new/a.neff", b"x")
    proc = world.capture(dest, "--publish", ok=False, FAKE_TOOLCHAIN="2")
    assert proc.returncode == 6 and "was hydrated for toolchain" in one_error(proc)
    assert world.captured_keys() == []


def test_files_still_being_written_publish_nothing(world: World) -> None:
    dest = world.tmp / "d1"
    dest = world.served(dest)
    runtime_writes(dest, "new/done.neff", b"complete")
    growing = dest / "new" / "growing.neff"
    stop = threading.Event()

    def writer() -> None:  # a runtime writing in place, in small pieces
        with open(growing, "ab") as f:
            while not stop.is_set():
                f.write(b"x" * 100)
                f.flush()
                time.sleep(0.02)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.1)
        proc = world.run("capture", "--config", str(world.config), "--dest", str(dest), "--publish", "--settle", "0.5",
                         ok=False)
    finally:
        stop.set()
        thread.join()
    assert proc.returncode == 12 and "still being written (e.g. new/growing.neff)" in one_error(proc)
    assert world.captured_keys() == [], "the complete file waits too: nothing is published half-way"


def _chattr(flag: str, path: Path) -> bool:
    proc = subprocess.run(["chattr", "-R", flag, str(path)], capture_output=True, check=False)
    return proc.returncode == 0


def test_a_store_without_write_permission_names_the_missing_permission_and_keeps_the_list(world: World) -> None:
    dest = world.tmp / "d1"
    dest = world.served(dest)
    runtime_writes(dest, "new/a.neff", b"x" * 5000)
    if shutil.which("chattr") is None or not _chattr("+i", world.store_dir):
        pytest.skip("this filesystem has no immutable flag (chattr +i), and root ignores mode bits")
    try:
        proc = world.capture(dest, "--publish", ok=False)
    finally:
        assert _chattr("-i", world.store_dir)
    line = one_error(proc)
    assert proc.returncode == 3 and "refused a write" in line and world.store_url in line
    assert "write access to the store directory" in proc.stderr
    assert world.captured_keys() == []
    journal = json.loads((dest / ".cachekeeper" / "capture.json").read_text())
    assert journal["pending"] == ["new/a.neff"] and journal["last_error"]

    retried = json.loads(world.capture(dest, "--publish", "--json").stdout)
    assert retried["files"] == ["new/a.neff"] and len(world.captured_keys()) == 1


def test_an_unreachable_store_fails_fast_and_the_next_run_publishes(world: World) -> None:
    dest = world.tmp / "d1"
    dest = world.served(dest)
    runtime_writes(dest, "new/a.neff", b"x")
    t0 = time.monotonic()
    proc = world.capture(dest, "--publish", "--store", "s3://bucket/ck", ok=False,
                         AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s",
                         AWS_DEFAULT_REGION="us-east-1")
    assert proc.returncode == 3 and one_error(proc)
    assert time.monotonic() - t0 < 30
    assert json.loads((dest / ".cachekeeper" / "capture.json").read_text())["pending"] == ["new/a.neff"]
    assert json.loads(world.capture(dest, "--publish", "--json").stdout)["manifest"]


def test_watch_publishes_each_round_and_once_more_when_stopped(world: World) -> None:
    dest = world.tmp / "d1"
    dest = world.served(dest)
    proc = subprocess.Popen([sys.executable, "-m", "cachekeeper", "capture", "--config", str(world.config), "--dest",
                             str(dest), "--publish", "--watch", "0.2", "--settle", "0.05", "--nice", "0"],
                            env=world.vars, cwd=world.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        runtime_writes(dest, "new/first.neff", b"1")
        deadline = time.monotonic() + 30
        while not world.captured_keys() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(world.captured_keys()) == 1, "a round published the first file"
        runtime_writes(dest, "new/second.neff", b"2")
        proc.send_signal(signal.SIGTERM)  # the pod or unit stops: one last round, then exit
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert len(world.captured_keys()) == 2, err


def test_captured_sets_pass_a_trusted_hydrate_only_when_signed_by_a_capture_key(world: World) -> None:
    builder_pem, server_pem = world.tmp / "builder.pem", world.tmp / "server.pem"
    builder = world.run("keygen", "-o", str(builder_pem)).stdout.strip()
    server = world.run("keygen", "-o", str(server_pem)).stdout.strip()
    # The prebuilt entry must be signed too for a trusted hydrate: a builder key signs it.
    for p in (world.store_dir / "manifests").rglob("*.json"):
        from cachekeeper.format.signing import SigningKey, publish_signature
        from cachekeeper.stores.file import FileStore
        publish_signature(FileStore(world.store_dir), SigningKey.load(builder_pem), p.read_bytes())
    by_server, by_builder, unsigned = world.tmp / "s", world.tmp / "b", world.tmp / "u"
    for dest, name in ((by_server, "server"), (by_builder, "builder"), (unsigned, "unsigned")):
        runtime_writes(world.served(dest), f"new/{name}.neff", name.encode())
    world.capture(by_server, "--publish", "--sign-key", str(server_pem))
    world.capture(by_builder, "--publish", "--sign-key", str(builder_pem))
    world.capture(unsigned, "--publish")

    report = world.hydrate(world.tmp / "trusting", "--trusted-key", builder, "--capture-key", server)
    trusting = Path(str(report["dest"]))
    placed = sorted(p.name for p in (trusting / "new").iterdir())
    assert placed == ["server.neff"], "only the set a capture key signed: not the builder-signed nor the unsigned"
    assert sum(str(m).startswith("captured/") for m in report["manifests"]) == 1  # type: ignore[attr-defined]

    builders_only = world.served(world.tmp / "builders-only", "--trusted-key", builder)
    assert (builders_only / ".cachekeeper").is_dir() and not (builders_only / "new").exists(), \
        "no capture keys listed: no captured set"


def test_a_capture_key_is_never_a_builder_key(world: World) -> None:
    server_pem = world.tmp / "server.pem"
    server = world.run("keygen", "-o", str(server_pem)).stdout.strip()
    # A prebuilt manifest signed by a serving host's key is refused by a hydrate that lists it as a capture key.
    for p in (world.store_dir / "manifests").rglob("*.json"):
        from cachekeeper.format.signing import SigningKey, publish_signature
        from cachekeeper.stores.file import FileStore
        publish_signature(FileStore(world.store_dir), SigningKey.load(server_pem), p.read_bytes())
    builder = world.run("keygen", "-o", str(world.tmp / "builder.pem")).stdout.strip()
    dest = world.tmp / "d"
    proc = world.run("hydrate", "--config", str(world.config), "--dest", str(dest), "--trusted-key", builder,
                     "--capture-key", server, "--require-all", ok=False)
    assert proc.returncode != 0
    assert "signed by capture key" in proc.stderr and "may sign only captured sets" in proc.stderr, proc.stderr
    # The hint follows the roles (docs/security.md): re-sign with a builder key; never "trust key K
    # (--trusted-key …)", which would make a serving host's key a builder key.
    [hint] = [line for line in proc.stderr.splitlines() if line.startswith("hint: ")]
    assert "trust key" not in hint and "re-sign" in hint and "never list a serving host's key" in hint, hint

    both = world.run("hydrate", "--config", str(world.config), "--dest", str(dest), "--trusted-key", server,
                     "--capture-key", server, ok=False)
    errors = [line for line in both.stderr.splitlines() if line.startswith("error:")]
    assert both.returncode == 2 and len(errors) == 1 and "capture key and as a builder" in errors[0], both.stderr
    assert not (dest / "new").exists()


@pytest.mark.services
def test_an_s3_bucket_that_denies_put_object_is_named_with_the_permission(world: World, s3_server: S3Server,
                                                                          s3_store_url: str) -> None:
    bucket = s3_store_url.split("/")[2]
    world.vars.update({k: os.environ[k] for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                   "AWS_DEFAULT_REGION")}, CACHEKEEPER_STORE=s3_store_url)
    store = open_store(s3_store_url)
    built = world.tmp / "built"
    publish(store, fingerprint=FakeBackend().fingerprint({}), spec=world.spec, roots={"cache": built},
            include=FakeBackend().include)
    dest = world.tmp / "s3-host"
    dest = world.served(dest)
    runtime_writes(dest, "new/a.neff", b"runtime")
    deny = {"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Principal": "*", "Action": ["s3:PutObject"],
                                                    "Resource": [f"arn:aws:s3:::{bucket}/*"]}]}
    s3_server.client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(deny))  # reads still work
    try:
        proc = world.capture(dest, "--publish", ok=False)
    finally:
        s3_server.client.delete_bucket_policy(Bucket=bucket)
    line = one_error(proc)
    assert proc.returncode == 3 and "refused a write" in line and s3_store_url in line
    assert "s3:PutObject" in proc.stderr
    assert not [k for k in store.list("manifests/") if "/captured/" in k], "nothing published half-way"
    assert json.loads(world.capture(dest, "--publish", "--json").stdout)["manifest"]
    assert [k for k in store.list("manifests/") if "/captured/" in k]


def test_a_hydrate_in_progress_makes_capture_wait_then_give_up_without_publishing(world: World) -> None:
    from cachekeeper.fs.locks import FileLock

    dest = world.tmp / "d1"
    dest = world.served(dest)
    runtime_writes(dest, "new/a.neff", b"x")
    with FileLock(dest / ".cachekeeper" / "lock"):  # what a running hydrate holds while it places files
        proc = world.capture(dest, "--publish", "--lock-timeout", "0.3", ok=False)
    assert proc.returncode == 10 and "locked" in one_error(proc)
    assert world.captured_keys() == []


def test_a_lockfile_pins_the_captured_sets_of_its_time_and_no_newer_ones(world: World) -> None:
    d1 = world.tmp / "d1"
    d1 = world.served(d1)
    runtime_writes(d1, "new/x.neff", b"before the lock")
    first = json.loads(world.capture(d1, "--publish", "--json").stdout)["manifest"]
    lockfile = world.tmp / "ck.lock"
    world.run("lock", "--config", str(world.config), "-o", str(lockfile))
    assert first in [m["name"] for m in json.loads(lockfile.read_text())["manifests"]]
    runtime_writes(d1, "new/y.neff", b"after the lock")
    world.capture(d1, "--publish")
    assert len(world.captured_keys()) == 2

    locked = world.tmp / "locked"
    world.run("hydrate", "--lockfile", str(lockfile), "--dest", str(locked))
    locked = served(locked)
    assert (locked / "new" / "x.neff").exists() and not (locked / "new" / "y.neff").exists()
    # a config hydrate takes every captured set
    assert (world.served(world.tmp / "latest") / "new" / "y.neff").exists()


def test_a_captured_set_signed_by_an_unlisted_key_hints_at_capture_keys_never_builder_keys(world: World) -> None:
    builder_pem, server_pem = world.tmp / "builder.pem", world.tmp / "server.pem"
    builder = world.run("keygen", "-o", str(builder_pem)).stdout.strip()
    world.run("keygen", "-o", str(server_pem))
    other = world.run("keygen", "-o", str(world.tmp / "other.pem")).stdout.strip()
    from cachekeeper.format.signing import SigningKey, publish_signature
    from cachekeeper.stores.file import FileStore

    for p in (world.store_dir / "manifests").rglob("*.json"):
        publish_signature(FileStore(world.store_dir), SigningKey.load(builder_pem), p.read_bytes())
    dest = world.tmp / "s"
    runtime_writes(world.served(dest), "new/server.neff", b"server")
    world.capture(dest, "--publish", "--sign-key", str(server_pem))
    # A lockfile pins the captured set, so a key that is not listed is an error, not a skip.
    lock = world.tmp / "ck.lock"
    world.run("lock", "--config", str(world.config), "-o", str(lock))
    proc = world.run("hydrate", "--lockfile", str(lock), "--dest", str(world.tmp / "t"), "--trusted-key", builder,
                     "--capture-key", other, ok=False)
    [hint] = [line for line in proc.stderr.splitlines() if line.startswith("hint: ")]
    assert proc.returncode == 4 and "--capture-key" in hint and "never --trusted-key" in hint, proc.stderr

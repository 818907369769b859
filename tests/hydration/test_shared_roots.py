"""Hydrates on one host share a root outside their dests (Inductor's per-host header dir): each takes
that root's own lock to sweep it, and a sweep removes only temp files whose writer is gone, never a live
hydrate's in-flight file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachekeeper.fs.locks import LiveTag
from cachekeeper.fs.paths import temp_path
from cachekeeper.publish import snapshot
from cachekeeper.publish.upload import publish
from cachekeeper.stores.file import FileStore

from .helpers import fingerprint, read_tree, spec, write_tree

REPO = Path(__file__).resolve().parents[2]
WORKERS = 8
ROUNDS = 3


def test_eight_concurrent_hydrates_sharing_a_root_all_succeed_round_after_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "SMALL_FILE", 16 << 10)  # every shared file its own blob: many temp files
    shared_files = {f"h{i}.gch": os.urandom(96 << 10) for i in range(6)}
    build = tmp_path / "build"
    write_tree(build / "cache", {"k/1.neff": b"kernel" * 100})
    write_tree(build / "shared", shared_files)
    store = tmp_path / "store"
    name = publish(FileStore(store), fingerprint=fingerprint(), spec=spec(), include=lambda r, rel, p: True,
                   roots={"cache": build / "cache", "shared": build / "shared"},
                   shared_roots=frozenset({"shared"})).manifest.name
    shared = tmp_path / "host-shared"
    work = tmp_path / "work"
    work.mkdir()
    # Debris of a hydrate killed earlier (its tag's lock is free), and a live writer's file (lock held).
    dead = temp_path(shared / "h0.gch", "rdeadx00000000")
    live_tag = "rlivex00000000"
    live = temp_path(shared / "h1.gch", live_tag)
    shared.mkdir()
    (shared / ".cachekeeper" / "live").mkdir(parents=True)
    (shared / ".cachekeeper" / "live" / "rdeadx00000000.lock").write_text("")
    dead.write_bytes(b"half a header")
    live.write_bytes(b"being written")
    procs = [subprocess.Popen([sys.executable, "-m", "tests.hydration.shared_root_worker", str(store), str(shared),
                               str(work), str(i), str(ROUNDS), name], cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)}) for i in range(WORKERS)]
    try:
        with LiveTag(shared / ".cachekeeper" / "live", live_tag):
            for r in range(ROUNDS):
                for f in shared.glob("*.gch"):  # every round, all eight write the shared files again
                    f.unlink()
                (work / f"go-{r}").touch()
                deadline = time.monotonic() + 60
                while len(list(work.glob(f"done-{r}-*")) + list(work.glob(f"fail-{r}-*"))) < WORKERS:
                    assert time.monotonic() < deadline, "workers hung"
                    time.sleep(0.02)
                failures = [p.read_text() for p in work.glob(f"fail-{r}-*")]
                assert not failures, f"round {r}: {len(failures)} of {WORKERS} failed:\n{failures[0]}"
                assert {k: v for k, v in read_tree(shared).items() if not k.endswith(".ck-tmp")} == shared_files
                assert live.exists(), "a sweep deleted a live writer's temp file"
    finally:
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:  # a failed round leaves them waiting for the next
                p.kill()
                p.wait()
    assert not dead.exists()  # the dead run's debris was swept
    assert all(read_tree(work / f"dest-{r}-{i}") == {"k/1.neff": b"kernel" * 100}
               for r in range(ROUNDS) for i in range(WORKERS))

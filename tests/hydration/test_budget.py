"""The boot budget: a deadline bounds the whole hydrate, what was placed before it ran out is kept and
recorded, and a rerun fetches only the rest. Durability is our own files' fsyncs, never os.sync()."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cachekeeper.errors import HydrateIncomplete
from cachekeeper.publish import snapshot
from cachekeeper.stores import reader
from cachekeeper.stores.base import Body
from cachekeeper.stores.file import FileStore
from cachekeeper.stores.reader import RetryPolicy

from .helpers import build_tree, hydrate_into, publish_tree, read_tree, write_tree

REPO = Path(__file__).resolve().parents[2]


class StallingStore(FileStore):
    """Accepts the request for some blobs and never answers (until released), like a wedged backend."""

    def __init__(self, root: Path, stall: set[str]) -> None:
        super().__init__(root)
        self.stall = stall
        self.release = threading.Event()

    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        if key.rsplit("/", 1)[-1] in self.stall and not self.release.is_set():
            # A real socket gives up after `read_timeout`; a wedged server never answers before that.
            self.release.wait(read_timeout)
            from cachekeeper.errors import StoreRetryable
            raise StoreRetryable(f"{self.url}/{key}: read timed out after {read_timeout:.2f}s")
        return super().open_range(key, start, end, read_timeout, connect_timeout)


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, bytes], str, str]:
    files = build_tree(6, 8)
    store_root = tmp_path / "store"
    m = publish_tree(FileStore(store_root), write_tree(tmp_path / "build", files), monkeypatch)
    stalled = next(b.digest for b in m.blobs if not b.packed)
    return store_root, files, m.name, stalled


def test_a_stalled_store_ends_at_the_deadline_and_what_was_placed_is_kept_and_recorded(
        cache: tuple[Path, dict[str, bytes], str, str], tmp_path: Path) -> None:
    root, files, name, stalled = cache
    store = StallingStore(root, {stalled})
    dest = tmp_path / "dest"
    t0 = time.monotonic()
    with pytest.raises(HydrateIncomplete, match="deadline of 1s ran out"):
        hydrate_into(lambda: store, dest, [name], deadline=1.0)
    assert time.monotonic() - t0 < 1.0 + 1.5
    state = json.loads((dest / ".cachekeeper" / "state.json").read_bytes())
    assert len(state["files"]) == len(files) - 1 and state["manifests"] == {}  # all but the stalled one
    assert read_tree(dest) == {k: v for k, v in files.items() if k in {p.split("/", 1)[1] for p in state["files"]}}
    # The store recovers: the rerun fetches only what is missing.
    store.release.set()
    report = hydrate_into(lambda: store, dest, [name], deadline=30)
    assert report.files_fetched == 1 and read_tree(dest) == files


def test_best_effort_returns_the_partial_report_instead_of_failing(
        cache: tuple[Path, dict[str, bytes], str, str], tmp_path: Path) -> None:
    root, files, name, stalled = cache
    report = hydrate_into(lambda: StallingStore(root, {stalled}), tmp_path / "d", [name], deadline=1.0,
                          best_effort=True)
    assert "deadline" in report.incomplete and report.files_fetched == len(files) - 1
    assert report.deadline_left == 0.0 and not report.noop


def test_a_store_that_keeps_failing_is_reported_once_and_the_rest_still_lands(
        cache: tuple[Path, dict[str, bytes], str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, files, name, stalled = cache
    monkeypatch.setattr(reader, "default_policy", lambda: RetryPolicy(stall=0.01, cap=0.01))
    with pytest.raises(HydrateIncomplete, match=r"1 of \d+ blobs could not be fetched .*gave up after 8 attempts"):
        hydrate_into(lambda: StallingStore(root, {stalled}), tmp_path / "d", [name], deadline=60)
    assert len(read_tree(tmp_path / "d")) == len(files) - 1


@pytest.mark.parametrize("durability", ["fsync", "both"])
def test_durability_is_our_own_fsyncs_never_a_global_sync(
        cache: tuple[Path, dict[str, bytes], str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        durability: str) -> None:
    root, files, name, _ = cache
    synced: list[int] = []
    real_fsync = os.fsync

    def no_sync() -> None:
        raise AssertionError("os.sync() flushes every filesystem on the host")

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "sync", no_sync)
    monkeypatch.setattr(os, "fsync", fsync)
    hydrate_into(lambda: FileStore(root), tmp_path / "d", [name], durability=durability)
    dirs = {p.parent for p in (tmp_path / "d").rglob("*.neff")}
    assert len(synced) >= len(files) + len(dirs) + 1  # each file, each changed dir, the state file


def test_boot_durability_fsyncs_only_the_state_file_and_records_the_boot(
        cache: tuple[Path, dict[str, bytes], str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.fs.durability import boot_id
    from cachekeeper.hydration.state import load_state

    from .helpers import record_fsyncs

    root, files, name, _ = cache
    synced = record_fsyncs(monkeypatch)
    hydrate_into(lambda: FileStore(root), tmp_path / "d", [name], durability="boot")
    assert read_tree(tmp_path / "d") == files
    assert not [p for p in synced if p.endswith(".neff") or ".neff." in p]   # no file's data is fsynced
    state = load_state(tmp_path / "d")
    assert state is not None and state.durability == "boot" and state.boot_id == boot_id() != ""


def test_peak_memory_stays_flat_for_a_large_pack_and_a_large_blob(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Packs stream into their members and blobs into their files: hydrating a 96 MiB pack and a 32 MiB
    blob grows resident memory by a fraction of that (the pack was held whole before, twice over)."""
    member = bytes(range(256)) * (4 << 10)   # 1 MiB
    files = {f"pack/{i:03d}.neff": member[:-1 - i] for i in range(96)}
    files["big.bin"] = os.urandom(1 << 20) * 32
    monkeypatch.setattr(snapshot, "PACK_TARGET", 1 << 40)  # one pack of all the small files
    m = publish_tree(FileStore(tmp_path / "store"), write_tree(tmp_path / "build", files), monkeypatch,
                     separate_blobs_above=2 << 20)
    assert any(b.packed and b.size > 90 << 20 for b in m.blobs)
    script = f"""
import resource
from pathlib import Path
from cachekeeper.stores.file import FileStore
from tests.hydration.helpers import hydrate_into
store = FileStore(Path({str(tmp_path / "store")!r}))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
hydrate_into(lambda: store, Path({str(tmp_path / "dest")!r}), [{m.name!r}])
print(base // 1024, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    base_mib, peak_mib = map(int, out.split())
    assert peak_mib - base_mib < 40, f"hydrate grew resident memory by {peak_mib - base_mib} MiB"
    assert read_tree(tmp_path / "dest") == files


class InterruptingStore(FileStore):
    """Ctrl-C lands while the hydrate waits for its first blob (the store is wedged): the interrupt reaches
    the main thread as it would from a terminal; each wedged read gives up after half a second, its temp
    file open until then, and a worker left running would start the next blob (a new temp file)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.interrupted = threading.Event()
        self.blob_reads = 0

    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        if key.startswith("blobs/"):
            import _thread

            from cachekeeper.errors import StoreError

            self.blob_reads += 1

            if not self.interrupted.is_set():
                self.interrupted.set()
                _thread.interrupt_main()
            time.sleep(0.5)
            raise StoreError(f"{self.url}/{key}: wedged")
        return super().open_range(key, start, end, read_timeout, connect_timeout)


def test_a_hydrate_interrupted_before_it_placed_anything_leaves_no_claim(
        cache: tuple[Path, dict[str, bytes], str, str], tmp_path: Path) -> None:
    root, files, name, _ = cache
    store = InterruptingStore(root)
    dest = tmp_path / "dest"
    with pytest.raises(KeyboardInterrupt):
        # 2 workers for 20 blobs: left running, they would open temp files for seconds after the interrupt.
        hydrate_into(lambda: store, dest, [name], threads=2)
    assert store.interrupted.is_set()
    # The interrupted hydrate stopped its workers before it re-raised: none starts another blob later.
    reads = store.blob_reads
    time.sleep(1.0)
    assert store.blob_reads == reads
    # No state names a toolchain for the dir, so another toolchain may use it; nothing else is left.
    assert not (dest / ".cachekeeper" / "state.json").exists()
    assert read_tree(dest) == {}
    # And this toolchain's next run fills it as a fresh one.
    report = hydrate_into(lambda: FileStore(root), dest, [name])
    assert read_tree(dest) == files and report.files_fetched == len(files)

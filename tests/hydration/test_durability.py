"""Durability "boot": a state file is trusted only within the boot (and on the filesystem) that wrote it.
After a reboot every listed file is re-verified, size first, then digest, before it is called in place;
a state file of format version 1 (always fsynced) is still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachekeeper.hydration.state import load_state, state_dir
from cachekeeper.stores.file import FileStore

from .helpers import build_tree, hydrate_into, publish_tree, read_tree, write_tree


@pytest.fixture
def hydrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FileStore, dict[str, bytes], str, Path]:
    files = build_tree(n_small=4, n_blobs=6)
    store = FileStore(tmp_path / "store")
    m = publish_tree(store, write_tree(tmp_path / "build", files), monkeypatch)
    dest = tmp_path / "d"
    hydrate_into(lambda: store, dest, [m.name], durability="boot")
    return store, files, m.name, dest


def _edit_state(dest: Path, **fields: object) -> None:
    path = state_dir(dest) / "state.json"
    doc = json.loads(path.read_bytes())
    doc.update(fields)
    path.write_text(json.dumps(doc))


def test_within_the_boot_a_repeat_is_a_noop(hydrated: tuple[FileStore, dict[str, bytes], str, Path]) -> None:
    store, _, name, dest = hydrated
    assert hydrate_into(lambda: store, dest, [name], durability="boot").noop


def test_after_a_reboot_every_file_is_verified_again_size_then_digest(
        hydrated: tuple[FileStore, dict[str, bytes], str, Path]) -> None:
    store, files, name, dest = hydrated
    _edit_state(dest, boot_id="another-boot")
    zeros, short = sorted(files)[:2]
    (dest / zeros).write_bytes(bytes(len(files[zeros])))   # what a power loss can leave: right size, zeros
    (dest / short).write_bytes(b"")
    report = hydrate_into(lambda: store, dest, [name], durability="boot")
    assert not report.noop and read_tree(dest) == files
    assert report.files_fetched == 2 and report.files_verified_local == len(files) - 2
    assert hydrate_into(lambda: store, dest, [name], durability="boot").noop   # trusted again, this boot


def test_a_state_file_of_another_filesystem_is_not_trusted(
        hydrated: tuple[FileStore, dict[str, bytes], str, Path]) -> None:
    store, files, name, dest = hydrated
    _edit_state(dest, filesystem="ext4:12345")
    report = hydrate_into(lambda: store, dest, [name], durability="boot")
    assert not report.noop and report.files_verified_local == len(files) and report.files_fetched == 0


def test_a_fsync_state_is_trusted_across_boots_and_version_1_still_loads(
        hydrated: tuple[FileStore, dict[str, bytes], str, Path], tmp_path: Path) -> None:
    store, _, name, _ = hydrated
    dest = tmp_path / "fsynced"
    hydrate_into(lambda: store, dest, [name], durability="fsync")
    _edit_state(dest, boot_id="another-boot")
    assert hydrate_into(lambda: store, dest, [name], durability="fsync").noop
    _edit_state(dest, v=1)
    for key in ("durability", "boot_id", "filesystem"):
        doc = json.loads((state_dir(dest) / "state.json").read_bytes())
        doc.pop(key)
        (state_dir(dest) / "state.json").write_text(json.dumps(doc))
    state = load_state(dest)
    assert state is not None and state.durability == "fsync"
    assert hydrate_into(lambda: store, dest, [name], durability="fsync").noop


def test_a_fsync_run_keeping_files_of_a_boot_run_still_speaks_only_for_this_boot(
        hydrated: tuple[FileStore, dict[str, bytes], str, Path]) -> None:
    store, _, name, dest = hydrated
    hydrate_into(lambda: store, dest, [name], durability="fsync", verify=True)   # verified again, not fsynced
    state = load_state(dest)
    assert state is not None and state.durability == "both"   # the kept files were never fsynced


def test_fsync_with_a_node_cache_makes_the_links_durable_before_the_state_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    from .helpers import record_fsyncs

    files = build_tree(n_small=2, n_blobs=3)
    store = FileStore(tmp_path / "store")
    m = publish_tree(store, write_tree(tmp_path / "build", files), monkeypatch)
    synced = record_fsyncs(monkeypatch)
    dest = tmp_path / "d"
    hydrate_into(lambda: store, dest, [m.name], durability="fsync", node_cache=str(tmp_path / "node"),
                 node_cache_link="hardlink")
    assert read_tree(dest) == files
    state_at = len(synced) - 1 - synced[::-1].index(str(dest / ".cachekeeper"))  # the final state file's rename
    parents = {str((dest / rel).parent) for rel in files} | {str(dest / "p"), str(dest / "b")}
    assert parents <= set(synced[:state_at])

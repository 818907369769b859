"""fs: the one write path (atomic), the one path guard (paths) and the locks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachekeeper.errors import DestinationError, IntegrityError, LockBusy, UnsafePath
from cachekeeper.fs.atomic import atomic_write_bytes, atomic_writer
from cachekeeper.fs.locks import FileLock, sweep_temp
from cachekeeper.fs.paths import SafeJoiner, ensure_dir, safe_join, safe_relpath

HOSTILE = ["../x", "a/../../x", "/etc/passwd", "a\\..\\b", "a\x00b", "", ".", "a/./b", "a//b", "C:/x", "..",
           "x/.."]


@pytest.mark.parametrize("rel", HOSTILE)
def test_hostile_relative_paths_are_refused(rel: str) -> None:
    with pytest.raises(UnsafePath):
        safe_relpath(rel)


@pytest.mark.parametrize("rel", HOSTILE)
def test_the_plan_joiner_refuses_the_same_paths(rel: str, tmp_path: Path) -> None:
    with pytest.raises(UnsafePath):
        SafeJoiner().join(tmp_path, rel)


def test_ensure_dir_makes_every_missing_parent_accepts_a_symlinked_dir_and_refuses_a_file(tmp_path: Path) -> None:
    ensure_dir(str(tmp_path / "a" / "b" / "c"))
    ensure_dir(tmp_path / "a" / "b" / "c")                  # again: nothing to do
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    ensure_dir(tmp_path / "link")                           # as `mkdir -p` (and Path.mkdir(exist_ok=True))
    ensure_dir(tmp_path / "link" / "sub")
    assert (tmp_path / "a" / "b" / "c").is_dir() and (tmp_path / "real" / "sub").is_dir()
    (tmp_path / "file").write_bytes(b"")
    for blocked in (tmp_path / "file", tmp_path / "file" / "sub"):
        with pytest.raises(DestinationError, match="cannot create directory"):
            ensure_dir(blocked)


@pytest.mark.parametrize("rel", ["a", "a/b/c.neff", "fxgraph/ab/key/entry", "..hidden", "a..b/c"])
def test_ordinary_relative_paths_are_accepted(rel: str) -> None:
    assert str(safe_relpath(rel)) == rel


def test_a_symlinked_parent_cannot_carry_a_write_outside_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(UnsafePath):
        safe_join(root, "link/file")
    assert safe_join(root, "dir/file") == root / "dir" / "file"


def _escapes_by_realpath(root: Path, rel: str) -> bool:
    """The reference verdict: a full `realpath` walk of the target's parent."""
    real_root, real_parent = os.path.realpath(root), os.path.realpath((root / rel).parent)
    return real_parent != real_root and not real_parent.startswith(real_root + os.sep)


def test_the_cached_joiner_gives_realpaths_verdict_for_every_kind_of_parent(tmp_path: Path) -> None:
    """One joiner per plan resolves each directory once; its verdicts must stay realpath's, also when a
    symlink sits below a directory it has already resolved, or points back inside the root."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "real" / "deep").mkdir(parents=True)
    outside.mkdir()
    (root / "real" / "out").symlink_to(outside)               # below a resolved dir, escaping
    (root / "real" / "back").symlink_to(root / "real" / "deep")  # a symlink that stays inside
    (root / "real" / "up").symlink_to("../..")                # relative, escaping
    (root / "file").write_bytes(b"x")                         # a file in the way (not an escape)
    rels = ["a", "real/f", "real/deep/f", "new/dir/f", "real/out/f", "real/out/sub/f", "real/back/f",
            "real/back/new/f", "real/up/f", "file/f", "real/deep/f2", "real/out/f2"]
    joiner = SafeJoiner()
    for rel in rels:
        if _escapes_by_realpath(root, rel):
            with pytest.raises(UnsafePath):
                joiner.join(root, rel)
        else:
            assert joiner.join(root, rel) == root / rel
    assert [rel for rel in rels if _escapes_by_realpath(root, rel)] == \
        ["real/out/f", "real/out/sub/f", "real/up/f", "real/out/f2"]


def test_atomic_write_checks_the_digest_before_anything_appears(tmp_path: Path) -> None:
    target = tmp_path / "f"
    with pytest.raises(IntegrityError):
        atomic_write_bytes(target, b"payload", expected_sha256="0" * 64)
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_writer_leaves_neither_target_nor_temp(tmp_path: Path) -> None:
    target = tmp_path / "f"
    with pytest.raises(RuntimeError), atomic_writer(target) as f:
        f.write(b"half")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_exclusive_write_never_replaces_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    atomic_write_bytes(target, b"first", exclusive=True)
    with pytest.raises(FileExistsError):
        atomic_write_bytes(target, b"second", exclusive=True)
    assert target.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_kill_9_mid_write_leaves_only_a_temp_file_that_sweep_removes(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "big"
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from cachekeeper.fs.atomic import atomic_writer\n"
        f"with atomic_writer(Path({str(target)!r})) as f:\n"
        "    f.write(b'x' * 1000); f.flush(); print('writing', flush=True); os.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == -9 and "writing" in proc.stdout
    assert not target.exists()
    assert sweep_temp(tmp_path) == 1
    assert list((tmp_path / "sub").iterdir()) == []


def test_a_destination_that_cannot_be_created_is_a_destination_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")  # a file where a directory must go: fails even for root
    with pytest.raises(DestinationError, match="cannot create directory"):
        atomic_write_bytes(blocker / "sub" / "f", b"x")


def test_a_held_lock_times_out_with_lock_busy(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom pathlib import Path\nfrom cachekeeper.fs.locks import FileLock\n"
        f"with FileLock(Path({str(path)!r})):\n    print('held', flush=True); time.sleep(30)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockBusy), FileLock(path, timeout=0.3):
            pass
        holder.kill()
        holder.wait()
        with FileLock(path, timeout=5):  # the kernel dropped the dead holder's lock: no stale locks
            pass
    finally:
        holder.kill()
        holder.wait()

"""Capture's scan and staging, on plain files: what counts as new, and what is never read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cachekeeper.captures.capture import Journal, Seen, _stage, is_runtime_temp, scan
from cachekeeper.errors import CaptureError
from cachekeeper.hydration.state import PlacedFile, State


def everything(root: str, rel: str, path: Path) -> bool:
    return True


@pytest.mark.parametrize(("name", "temp"), [
    (".a.neff.1234.140.tmp", True),      # Inductor's write_atomic
    (".tmp.k2j3h4", True),               # the Neuron runtime's mkstemp beside the NEFF
    ("x.neff.ck-tmp", True), ("c1.lock", True),
    ("c1a2b3.so", False), ("k.neff", False), ("entry", False),
])
def test_runtime_temp_names(name: str, temp: bool) -> None:
    assert is_runtime_temp(name) is temp


def test_scan_sorts_new_placed_published_refused_and_skipped(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "aa").mkdir(parents=True)
    (dest / ".cachekeeper").mkdir()
    (dest / ".cachekeeper" / "state.json").write_text("{}")
    for name in ("placed.so", "published.so", "new.so", ".new.so.1.2.tmp"):
        (dest / "aa" / name).write_bytes(b"x")
    (dest / "aa" / "link.so").symlink_to(dest / "aa" / "new.so")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    (dest / "linked-dir").symlink_to(outside)
    st = os.stat(dest / "aa" / "published.so")
    state = State(files={"cache/aa/placed.so": PlacedFile("0" * 64, 0, 0)})
    journal = Journal(published={"cache/aa/published.so": (st.st_size, st.st_mtime_ns)})

    found = scan(dest, state, journal, everything)
    assert [s.path for s in found.new] == ["aa/new.so"]
    assert found.refused == ["aa/link.so", "linked-dir"] and (found.placed, found.published, found.skipped) == (1, 1, 1)


def test_staging_refuses_a_file_swapped_for_a_symlink_after_the_scan(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    target = dest / "k.neff"
    target.write_bytes(b"compiled")
    st = os.lstat(target)
    seen = Seen("k.neff", st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino)
    assert _stage(dest, tmp_path / "staging", seen).abspath.read_bytes() == b"compiled"

    (tmp_path / "secret").write_bytes(b"compiled")
    target.unlink()
    target.symlink_to(tmp_path / "secret")
    with pytest.raises(CaptureError, match="changed while capturing"):
        _stage(dest, tmp_path / "staging2", seen)
    assert not (tmp_path / "staging2" / "k.neff").exists()

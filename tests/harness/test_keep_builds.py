"""tests/harness/keep_builds.py changes one name, and the shared prebuild reads what it keeps: the name must
still be the one the worker builds in, and a kept workdir must hold what the build left, without its lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachekeeper.worker import prebuild, workdirs
from tests.harness.keep_builds import keeping


def test_the_worker_builds_in_the_workdir_the_harness_replaces() -> None:
    assert prebuild.workdir is workdirs.workdir


def test_each_workdir_is_copied_before_it_is_removed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(prebuild, "workdir", prebuild.workdir)   # restored after the test
    keeping(tmp_path / "keep")
    (tmp_path / "root").mkdir()
    for text in ("first", "second"):
        with prebuild.workdir(tmp_path / "root") as wd:
            (wd / "cache").mkdir()
            (wd / "cache" / "f").write_text(text)
        assert not wd.exists()
    kept = sorted((tmp_path / "keep").iterdir())
    assert len(kept) == 2 and all(p.name.startswith(workdirs.PREFIX) for p in kept)
    assert sorted((p / "cache" / "f").read_text() for p in kept) == ["first", "second"]
    assert not any((p / workdirs.LOCK_NAME).exists() for p in kept)

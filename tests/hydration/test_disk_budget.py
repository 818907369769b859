"""A dest's disk budget: entries go by last use (hydrate and `record_use` set it), never one wanted now,
used within the min age, or pinned by a kept lockfile; `gc --dest` plans and, with --run, applies it;
`gc --node-cache` never evicts a blob a dest links."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cachekeeper.format.manifest import Manifest
from cachekeeper.hydration.nodecache import NodeCache
from cachekeeper.hydration.resolve import write_lockfile
from cachekeeper.hydration.state import USED, load_state, record_use, state_dir
from cachekeeper.stores.file import FileStore

from .helpers import build_tree, fingerprint, hydrate_into, publish_tree, read_tree, write_tree

Two = tuple[FileStore, list[Manifest], list[dict[str, bytes]]]


@pytest.fixture
def two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Two:
    store = FileStore(tmp_path / "store")
    trees = [{f"{m}/{k}": v for k, v in build_tree(n_small=2, n_blobs=3, seed=i).items()} for i, m in enumerate("ab")]
    ms = [publish_tree(store, write_tree(tmp_path / f"build{m}", t), monkeypatch, model=m)
          for m, t in zip("ab", trees, strict=True)]
    return store, ms, trees


def _age(dest: Path, name: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(state_dir(dest) / USED / f"{name}.json", (then, then))


def _gc(*args: str) -> Any:
    from cachekeeper.cli import _register, cli

    _register()
    return CliRunner().invoke(cli, ["gc", *args])


def _a_two_hours_ago(two: Two, dest: Path) -> None:
    store, (a, _), _ = two
    hydrate_into(lambda: store, dest, [a.name])
    _age(dest, a.name, 7200)


def test_hydrate_evicts_the_least_recently_used_entry_it_does_not_want(two: Two, tmp_path: Path) -> None:
    store, (a, b), (_, tb) = two
    dest = tmp_path / "d"
    _a_two_hours_ago(two, dest)
    report = hydrate_into(lambda: store, dest, [b.name], max_bytes=sum(map(len, tb.values())) + 10)
    assert report.evicted == [a.name] and read_tree(dest) == tb
    state = load_state(dest)
    assert state is not None and list(state.manifests) == [b.name]
    assert all(k.startswith("cache/b/") for k in state.files)


def test_an_entry_used_within_the_min_age_is_never_evicted_and_one_line_says_over_budget(
        two: Two, tmp_path: Path) -> None:
    store, (a, b), (ta, tb) = two
    dest = tmp_path / "d"
    _a_two_hours_ago(two, dest)
    record_use(dest, [a.name])                # the runtime helper served it just now
    report = hydrate_into(lambda: store, dest, [b.name], max_bytes=100)
    assert report.evicted == [] and read_tree(dest) == {**ta, **tb}
    assert len(report.warnings) == 1 and "over its budget of 100" in report.warnings[0]


def test_gc_dest_plans_then_applies_and_keeps_what_a_lockfile_pins(
        two: Two, tmp_path: Path) -> None:
    store, (a, b), (ta, tb) = two
    dest = tmp_path / "d"
    hydrate_into(lambda: store, dest, [a.name])
    hydrate_into(lambda: store, dest, [b.name])
    _age(dest, a.name, 9000)
    _age(dest, b.name, 8000)
    lock = tmp_path / "ck.lock"
    write_lockfile(lock, "fake", fingerprint(), [a])
    plan = _gc("--dest", str(dest), "--max-bytes", "1", "--keep-lockfile", str(lock))
    assert plan.exit_code == 0 and plan.stdout.splitlines() == [
        f"would evict  entry {b.name}  ({sum(map(len, tb.values()))} bytes)"]
    assert read_tree(dest) == {**ta, **tb}
    run = _gc("--dest", str(dest), "--max-bytes", "1", "--keep-lockfile", str(lock), "--run")
    assert run.exit_code == 0 and read_tree(dest) == ta, run.output
    assert "still" in run.stderr and "bytes over" in run.stderr      # a is pinned: reported, kept


def test_gc_without_a_budget_is_one_error_line() -> None:
    result = _gc("--dest", "/nonexistent", "--max-bytes", "-1")
    assert result.exit_code == 2
    assert [ln for ln in result.stderr.splitlines() if ln.startswith("error:")] == [
        "error: --max-bytes must be a byte count from 1 to 2**60 (e.g. 20G), got '-1'"]


def test_gc_node_cache_evicts_only_blobs_no_dest_links(
        two: Two, tmp_path: Path) -> None:
    import shutil

    store, (a, b), (ta, tb) = two
    node = tmp_path / "node"
    hydrate_into(lambda: store, tmp_path / "da", [a.name], node_cache=str(node), node_cache_link="hardlink")
    hydrate_into(lambda: store, tmp_path / "db", [b.name], node_cache=str(node), node_cache_link="hardlink")
    shutil.rmtree(tmp_path / "da")
    result = _gc("--node-cache", str(node), "--max-bytes", "1", "--run")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == len(ta)           # a's blobs, none of b's
    assert NodeCache(node).size() == sum(map(len, tb.values())) and read_tree(tmp_path / "db") == tb

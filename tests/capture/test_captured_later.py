"""One catalog for captured sets (capture indexes into the default catalog, as prebuild does), and a
repeat hydrate picks up captured sets published since its last run at the cost of one listing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachekeeper.stores.file import FileStore

from .conftest import World, runtime_writes


def test_capture_indexes_into_the_default_catalog(world: World) -> None:
    world.run("db", "upgrade")    # the default catalog (CACHEKEEPER_HOME), as a prebuild host has it
    runtime_writes(world.served(world.tmp / "d1"), "new/a.neff", b"runtime")
    world.capture(world.tmp / "d1", "--publish")
    listed = world.run("ls", "--captured")
    assert "1 captured sets" in listed.stderr and "captured" in listed.stdout
    assert any(r["captured"] for r in json.loads(world.run("stats", "--json").stdout))


def test_a_repeat_hydrate_takes_a_set_captured_since_with_one_listing(world: World,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    first = world.tmp / "first"
    world.served(first)
    assert world.hydrate(first)["noop"]
    runtime_writes(world.served(world.tmp / "other"), "new/b.neff", b"another host's runtime compile")
    world.capture(world.tmp / "other", "--publish")

    again = world.hydrate(first)
    assert not again["noop"] and again["files_fetched"] == 1
    assert (Path(str(again["dest"])) / "new" / "b.neff").read_bytes() == b"another host's runtime compile"
    assert world.hydrate(first)["noop"], "a set already seen does not make the next run a full one"


def test_the_no_op_reads_one_listing_and_no_manifest(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    import cachekeeper

    dest = world.tmp / "api"
    cachekeeper.hydrate(config=world.config, dest=dest, store=world.store_url)
    calls: list[str] = []
    for name in ("list", "get_bytes", "download"):
        original = getattr(FileStore, name)

        def spy(self: FileStore, *a: object, _name: str = name, _f: object = original, **k: object) -> object:
            calls.append(_name)
            return _f(self, *a, **k)  # type: ignore[operator]

        monkeypatch.setattr(FileStore, name, spy)
    report = cachekeeper.hydrate(config=world.config, dest=dest, store=world.store_url)
    assert report.noop and calls == ["list"]

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


def _report_fleet(world: World) -> Path:
    """The same deployment's config without the opt-in: `capture: report`, the default."""
    config = world.tmp / "report.yaml"
    config.write_text(world.config.read_text().replace("capture: publish\n", ""))
    assert "capture:" not in config.read_text()
    return config


def test_a_report_fleet_never_runs_a_captured_set_and_says_so_once(world: World) -> None:
    """`capture: report` means runtime code reaches this fleet only through the builder: a captured set
    that another (opted-in) fleet published for the same toolchain and entry is left in the store, with
    one warning line on the run that would have taken it."""
    runtime_writes(world.served(world.tmp / "publisher"), "new/b.neff", b"a serving host's compile")
    world.capture(world.tmp / "publisher", "--publish")
    assert len(world.captured_keys()) == 1

    proc = world.run("hydrate", "--config", str(_report_fleet(world)), "--dest", str(world.tmp / "d"), "--json")
    report = json.loads(proc.stdout.splitlines()[0])
    assert not (Path(str(report["dest"])) / "new" / "b.neff").exists()
    assert report["files_fetched"] == 3                   # the prebuilt entry, whole
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "1 captured sets" in warnings[0] and "capture: report" in warnings[0]
    opted_in = world.hydrate(world.tmp / "d2")            # the publishing fleet's own config still takes it
    assert (Path(str(opted_in["dest"])) / "new" / "b.neff").read_bytes() == b"a serving host's compile"


def test_a_report_fleet_s_no_op_opens_no_store(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """No captured set can change what it hydrates, so a repeat run with everything in place asks the
    store nothing (a lockfile's no-op is the same): the boot skips the SDK client and the listing."""
    import cachekeeper
    import cachekeeper.stores as stores

    config, dest = _report_fleet(world), world.tmp / "api"
    cachekeeper.hydrate(config=config, dest=dest, store=world.store_url)
    opened: list[object] = []
    real = stores.open_store
    monkeypatch.setattr(stores, "open_store", lambda *a, **k: opened.append(a) or real(*a, **k))
    assert cachekeeper.hydrate(config=config, dest=dest, store=world.store_url).noop
    assert opened == []
    assert cachekeeper.hydrate(config=world.config, dest=dest, store=world.store_url).noop
    assert len(opened) == 1, "the opted-in config's no-op opens the store, to list captured sets"

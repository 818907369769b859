"""Fleet figures: the catalog indexes captured sets apart from prebuilt entries, on SQLite and Postgres,
and `ls`, `stats`, `coverage` and hydrate's JSON summary count them."""

from __future__ import annotations

import json
import socket

import pytest

from .conftest import World, runtime_writes

pytestmark = pytest.mark.services


def test_captured_sets_are_counted_apart_from_prebuilt_entries(world: World, catalog_url: str) -> None:
    world.run("db", "upgrade", "--catalog", catalog_url)  # Postgres is migrated by hand (SQLite by itself)
    d1 = world.tmp / "d1"
    first = world.hydrate(d1)
    assert first["counts"] == {"hit": 1, "missed": 0, "captured": 0}
    runtime_writes(d1, "new/a.neff", b"shape B")
    runtime_writes(d1, "new/b.neff", b"shape B, second kernel")
    report = json.loads(world.capture(d1, "--publish", "--catalog", catalog_url, "--json").stdout)
    assert report["error"] is None, "the captured set was indexed"
    # The prebuilt entry reaches the catalog from the bucket (the source of truth); the captured row stays.
    world.run("catalog", "rebuild", "--catalog", catalog_url)

    entries = [json.loads(x) for x in world.run("ls", "--catalog", catalog_url, "--json").stdout.splitlines()]
    assert [r["name"] for r in entries] == [world.spec.key]
    listed = world.run("ls", "--captured", "--catalog", catalog_url, "--json").stdout
    captured = [json.loads(x) for x in listed.splitlines()]
    assert [(r["kind"], r["name"], r["file_count"]) for r in captured] == [("captured", report["manifest"], 2)]
    assert captured[0]["build"]["host"] == socket.gethostname()
    text = world.run("ls", "--captured", "--catalog", catalog_url).stdout
    assert report["manifest"] in text and "captured" in text

    [fp] = json.loads(world.run("stats", "--catalog", catalog_url, "--json").stdout)
    assert (fp["entries"], fp["shared"], fp["captured"]) == (1, 0, 1)
    assert "1 captured" in world.run("stats", "--catalog", catalog_url).stdout

    for where in (("--catalog", catalog_url), ("--no-catalog",)):
        cov = json.loads(world.run("coverage", str(world.config), *where, "--json").stdout)
        assert cov["missing"] == 0 and cov["captured"] == {fp["id"]: 1}

    second = world.hydrate(world.tmp / "d2")
    assert second["counts"] == {"hit": 1, "missed": 0, "captured": 1}

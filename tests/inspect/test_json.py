"""`--json` on every inspection command; listings that can be long stream as JSON lines."""

from __future__ import annotations

import json

import click

from cachekeeper.cli import _register, cli
from cachekeeper.format.layout import manifest_key
from tests.inspect.conftest import World
from tests.inspect.helpers import OTHER

INSPECTION = ("ls", "show", "stats", "coverage", "verify", "gc", "validate", "doctor", "diff", "explain")


def test_every_inspection_command_takes_json() -> None:
    _register()
    for name in INSPECTION:
        command = cli.commands[name]
        assert any(isinstance(p, click.Option) and "--json" in p.opts for p in command.params), name


def test_validate_streams_one_json_line_per_entry(world: World) -> None:
    lines = world.run("validate", str(world.config), "--json").stdout.splitlines()
    docs = [json.loads(line) for line in lines]
    assert [d["key"] for d in docs] == [s.key for s in (world.tiny64, world.tiny128, world.small64, world.small128)]
    assert docs[0]["entry"] == world.tiny64.label() and docs[0]["spec"]["model"] == "tiny"


def test_show_prints_the_manifest_on_one_line(world: World) -> None:
    out = world.run("show", manifest_key(OTHER.id, world.small64.key), "--json").stdout
    assert out.count("\n") == 1
    doc = json.loads(out)
    assert doc["fingerprint_id"] == OTHER.id and doc["name"] == world.small64.key and len(doc["digest"]) == 64


def test_gc_plan_streams_json_lines_then_its_totals(world: World) -> None:
    lines = [json.loads(x) for x in world.run("gc", "--drop", OTHER.id, "--min-age", "0", "--json").stdout.splitlines()]
    *objects, last = lines
    manifests = sorted(o["key"] for o in objects if o["kind"] == "manifest")
    assert manifests == sorted(manifest_key(OTHER.id, s.key) for s in (world.tiny64, world.small64, world.small128))
    assert {o["kind"] for o in objects} == {"manifest", "blob"} and not any(o["run"] for o in objects)
    assert last["summary"]["manifests"] == 3 and last["summary"]["blobs"] == 3 and last["summary"]["run"] is False

"""`cachekeeper diff` and `explain` through the real command group, on a SQLite catalog and a file store
holding entries of the fake backend built for three toolchains; every bad input is one error line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cachekeeper.catalog import Catalog
from cachekeeper.format.fingerprint import Fingerprint
from tests.inspect.conftest import World, one_error
from tests.inspect.helpers import HOST, OTHER, THIRD, cli_env, manifest, publish

REPO = Path(__file__).resolve().parents[2]


def test_diff_of_two_fingerprints_prints_fields_entries_and_rebuild_cost(world: World) -> None:
    doc = json.loads(world.run("diff", HOST.id, OTHER.id[:6], "--json").stdout)
    assert (doc["a"]["id"], doc["b"]["id"]) == (HOST.id, OTHER.id)
    assert doc["fields"] == {"toolchain": {"a": "1", "b": "2"}}
    assert [e["key"] for e in doc["only_a"]] == [world.tiny128.key]
    assert {e["key"] for e in doc["only_b"]} == {world.small64.key, world.small128.key}
    assert doc["rebuild_for_b"] | {"workers": 0} == {"entries": 1, "size": 20_000, "seconds": 20.0, "unknown": 0,
                                                       "workers": 0, "wall_seconds": 20.0}
    assert doc["rebuild_for_a"]["unknown"] == 1 and doc["rebuild_for_a"]["seconds"] == 40.0
    same = json.loads(world.run("diff", HOST.id, HOST.id[:4], "--json").stdout)
    assert same["fields"] == {} and same["only_a"] == same["only_b"] == []
    text = world.run("diff", HOST.id, OTHER.id).stdout
    assert "toolchain  1  ->  2" in text and f"{world.tiny128.key[:12]}  tiny/transformer fake:full 128x64x1" in text


def test_diff_host_against_a_fingerprint_and_a_what_if_upgrade(world: World) -> None:
    host = json.loads(world.run("diff", "--host", OTHER.id, "--json").stdout)
    assert host["a"]["id"] == HOST.id and [e["key"] for e in host["only_a"]] == [world.tiny128.key]
    what_if = json.loads(world.run("diff", "--set", "toolchain=9", "--backend", "fake", "--workers", "2",
                                   "--json").stdout)
    assert what_if["b"]["id"] == Fingerprint.of("fake", {"toolchain": "9"}).id
    assert {e["key"] for e in what_if["only_a"]} == {world.tiny64.key, world.tiny128.key}
    cost = what_if["rebuild_for_b"]
    assert (cost["entries"], cost["seconds"], cost["workers"], cost["wall_seconds"]) == (2, 30.0, 2, 20.0)


def test_diff_bad_input_is_one_line(world: World) -> None:
    assert one_error(world.run("diff", "--set", "torch=2.14.0", "--backend", "fake", code=2)) == \
        "error: the fake fingerprint has no field 'torch'"
    assert one_error(world.run("diff", HOST.id, "ffffffffffffff00", code=2)) == \
        "error: no fingerprint 'ffffffffffffff00' in the catalog"
    assert "diff needs two fingerprint ids" in one_error(world.run("diff", HOST.id, code=2))
    # Two toolchains whose ids share a first digit make that digit ambiguous.
    by_digit: dict[str, list[Fingerprint]] = {}
    for i in range(17):
        fp = Fingerprint.of("fake", {"toolchain": f"x{i}"})
        by_digit.setdefault(fp.id[0], []).append(fp)
    pair = next(fps for fps in by_digit.values() if len(fps) > 1)[:2]
    with Catalog.open(world.catalog) as catalog:
        publish(catalog, None, *(manifest(world.tiny64, fp) for fp in pair))
    assert f"fingerprint prefix '{pair[0].id[0]}' matches" in one_error(
        world.run("diff", pair[0].id[0], HOST.id, code=2))


def test_an_unreachable_or_older_catalog_is_one_line(world: World) -> None:
    down = world.run("diff", "a", "b", "--catalog", "postgresql+psycopg://u@127.0.0.1:9/db", code=5)
    assert one_error(down).startswith("error: cannot connect to catalog postgresql+psycopg://u@127.0.0.1:9/db")
    with Catalog.connect(world.catalog) as catalog:
        catalog.downgrade("0001")
    old = world.run("diff", HOST.id, OTHER.id, code=5)
    assert "is at revision 0001" in one_error(old) and "cachekeeper db upgrade" in old.stderr
    for command in (["explain", world.tiny64.key, "--config", str(world.config)], ["dashboard", "--port", "1"]):
        assert "is at revision 0001" in one_error(world.run(*command, code=5))     # before any server starts


def test_explain_says_hit_or_names_the_nearest_toolchains_and_why(world: World) -> None:
    hit = world.run("explain", world.tiny64.key[:10], "--config", str(world.config))
    assert hit.stdout.startswith(f"HIT   {world.tiny64.key[:12]}")
    miss = world.run("explain", "--model", "small", "--shape", "64x64x1", "--config", str(world.config), code=1)
    assert f"built for 2 other toolchain(s); nearest:\n  {OTHER.id}: 1 field(s) differ" in miss.stdout
    assert "toolchain: '2' (built) vs '1' (this host)" in miss.stdout
    lines = world.run("explain", "--model", "small", "--config", str(world.config), "--json", code=1).stdout
    docs = [json.loads(line) for line in lines.splitlines()]      # JSON lines, one per entry
    assert [d["key"] for d in docs] == [world.small128.key, world.small64.key] or \
        [d["key"] for d in docs] == [world.small64.key, world.small128.key]
    small64 = next(d for d in docs if d["key"] == world.small64.key)
    assert [n["fingerprint_id"] for n in small64["nearest"]] == [OTHER.id, THIRD.id]
    assert small64["nearest"][0]["differs"] == {"toolchain": {"built": "2", "host": "1"}}
    from_store = world.run("explain", "--model", "small", "--config", str(world.config), "--json", "--no-catalog",
                           code=1).stdout
    assert sorted(from_store.splitlines()) == sorted(lines.splitlines())


def test_explain_bad_input_is_one_line(world: World) -> None:
    assert "has no entry with model 'nope'" in one_error(
        world.run("explain", "--model", "nope", "--config", str(world.config), code=2))
    assert "which entry?" in one_error(world.run("explain", "--config", str(world.config), code=2))
    assert "matches 4 entries" in one_error(world.run("explain", "", "--config", str(world.config), code=2))


def test_hydrate_json_explains_each_missed_entry_without_a_database(world: World) -> None:
    dest = world.tmp / "dest"
    code = ("import sys\nfrom cachekeeper.cli import main\n"
            f"sys.argv = ['cachekeeper', 'hydrate', '--config', {str(world.config)!r}, '--dest', {str(dest)!r},"
            " '--json']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "heavy = {'torch', 'sqlalchemy', 'alembic'}\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n")
    env = cli_env(world.tmp, CACHEKEEPER_STORE=world.store, FAKE_SHARED_DIR=str(world.tmp / "shared"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    report, imported = proc.stdout.strip().splitlines()
    assert imported == "[]"
    doc = json.loads(report)
    assert sorted(doc["missing"]) == sorted([world.small64.key, world.small128.key])
    why = {e["key"]: e for e in doc["explanations"]}
    assert why[world.small64.key]["entry"] == world.small64.label()
    assert [n["fingerprint_id"] for n in why[world.small64.key]["nearest"]] == [OTHER.id, THIRD.id]
    assert why[world.small128.key]["nearest"][0]["differs"] == {"toolchain": {"built": "2", "host": "1"}}


def test_diff_reads_the_build_times_a_real_prebuild_recorded(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from cachekeeper.cli import _register, cli
    from tests.inspect.helpers import write_config

    config = write_config(tmp_path)
    env = cli_env(tmp_path, FAKE_SHARED_DIR=str(tmp_path / "shared"))
    _register()
    built = CliRunner().invoke(cli, ["prebuild", str(config), "--model", "tiny"], env=env)
    assert built.exit_code == 0, built.output
    result = CliRunner().invoke(cli, ["diff", "--set", "toolchain=2", "--backend", "fake", "--json"], env=env)
    assert result.exit_code == 0, result.output
    cost = json.loads(result.stdout)["rebuild_for_b"]
    assert cost["entries"] == 2 and cost["unknown"] == 0 and cost["seconds"] > 0

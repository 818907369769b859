"""Fleet figures: the catalog indexes captured sets apart from prebuilt entries (revision 0003, on SQLite
and Postgres), and `ls`, `stats`, `coverage` and hydrate's JSON summary count them."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from cachekeeper.captures.capture import captured_name
from cachekeeper.catalog import Catalog
from cachekeeper.errors import ManifestError
from cachekeeper.format.manifest import KIND_CAPTURED, Manifest
from tests.catalog.helpers import FP, entry

from .conftest import World, runtime_writes


def captured_set(extends: str, paths: tuple[str, ...] = ("fxgraph/x/1", "fxgraph/x/2")) -> Manifest:
    base = entry()
    files = tuple(f.__class__(f.root, p, f.size, f.sha256, f.blob) for f, p in zip(base.files, paths, strict=False))
    return Manifest(KIND_CAPTURED, captured_name(paths), FP, files, base.blobs,
                    provenance={"host": "serve-7", "time": "2026-12-01T04:00:00Z", "state": "0" * 64,
                                "extends": [extends]})


@pytest.mark.services
def test_the_catalog_counts_captured_sets_apart_from_prebuilt_entries(catalog_url: str) -> None:
    prebuilt = entry()
    with Catalog.open(catalog_url, auto_migrate=True) as catalog:
        catalog.record(prebuilt, store_url="file:///s")
        catalog.record(captured_set(prebuilt.name), store_url="file:///s")
        [fp] = catalog.fingerprints()
        assert (fp.entries, fp.shared, fp.captured) == (1, 0, 1)
        assert [r.name for r in catalog.find()] == [prebuilt.name]
        [row] = catalog.find(kind=KIND_CAPTURED)
        assert row.entry_key is None and row.build["host"] == "serve-7" and row.file_count == 2


def test_a_captured_manifest_round_trips_and_rejects_a_spec_or_a_foreign_name() -> None:
    m = captured_set("k")
    again = Manifest.from_bytes(m.to_bytes())
    assert again.provenance == m.provenance and again.digest == m.digest and m.key.endswith(f"/{m.name}.json")
    doc = json.loads(m.to_bytes())
    assert doc["schema"] == 2
    for bad in ({**doc, "schema": 1}, {**doc, "name": "captured/../../x"}, {**doc, "kind": "entry"}):
        with pytest.raises(ManifestError):
            Manifest.from_bytes(json.dumps(bad).encode())


def _rows(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_ls_stats_coverage_and_hydrate_show_captured_sets(world: World, tmp_path: Path) -> None:
    catalog_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    d1 = world.tmp / "d1"
    first = world.hydrate(d1)
    d1 = Path(str(first["dest"]))   # the toolchain's own dir under the dest
    assert first["counts"] == {"hit": 1, "missed": 0, "captured": 0}
    runtime_writes(d1, "new/a.neff", b"shape B")
    runtime_writes(d1, "new/b.neff", b"shape B, second kernel")
    report = json.loads(world.capture(d1, "--publish", "--catalog", catalog_url, "--json").stdout)
    assert report["error"] is None, "the captured set was indexed"
    # The prebuilt entry reaches the catalog from the bucket (the source of truth); the captured row stays.
    world.run("catalog", "rebuild", "--catalog", catalog_url)

    assert [r["name"] for r in _rows(world.run("ls", "--catalog", catalog_url, "--json").stdout)] == [world.spec.key]
    captured = _rows(world.run("ls", "--captured", "--catalog", catalog_url, "--json").stdout)
    assert [(r["kind"], r["name"], r["file_count"]) for r in captured] == [("captured", report["manifest"], 2)]
    assert captured[0]["build"]["host"] == socket.gethostname()  # type: ignore[index]
    assert report["manifest"] in world.run("ls", "--captured", "--catalog", catalog_url).stdout

    [fp] = json.loads(world.run("stats", "--catalog", catalog_url, "--json").stdout)
    assert (fp["entries"], fp["shared"], fp["captured"]) == (1, 0, 1)
    for where in (("--catalog", catalog_url), ("--no-catalog",)):
        cov = json.loads(world.run("coverage", str(world.config), *where, "--json").stdout)
        assert cov["missing"] == 0 and cov["captured"] == {fp["id"]: 1}

    second = world.hydrate(world.tmp / "d2")
    assert second["counts"] == {"hit": 1, "missed": 0, "captured": 1}

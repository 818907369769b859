"""`stats --traffic` and the dashboard show, per toolchain, the shapes served but not prebuilt (from the
store's miss reports, against the catalog's entries), with the same figures in `stats --json`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from cachekeeper.catalog import Catalog
from cachekeeper.cli import _register, cli
from cachekeeper.cli.inspect import traffic_view
from cachekeeper.dashboard.app import create_app
from cachekeeper.format.spec import EntrySpec, Shape
from cachekeeper.publish.upload import publish
from cachekeeper.reports.miss import build_report, write_report
from cachekeeper.runtime.miss_watch import CallRecord
from cachekeeper.stores.file import FileStore
from tests.fakes import FakeBackend


def served(height: int, compiled: bool, wall: float) -> CallRecord:
    return CallRecord("tiny", height, 64, 1, None, None, compiled, int(compiled), wall, time.time())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    store = FileStore(tmp_path / "store", create=True)
    catalog_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    fp = FakeBackend().fingerprint({})
    (tmp_path / "built" / "0").mkdir(parents=True)
    (tmp_path / "built" / "0" / "g.neff").write_bytes(b"graph")
    with Catalog.open(catalog_url, auto_migrate=True) as catalog:
        publish(store, fingerprint=fp, spec=EntrySpec("tiny", "transformer", "fake", "full", Shape(64, 64, 1),
                                                      "float32"),
                roots={"cache": tmp_path / "built"}, include=FakeBackend().include, catalog=catalog)
    for host in ("a" * 16, "b" * 16):
        write_report(store, build_report([served(64, False, 0.1), served(96, True, 30.1), served(96, False, 0.1)],
                                         fp.id, "fake", host=host))
    yield tmp_path, catalog_url, fp.id


def test_stats_json_lists_served_but_not_prebuilt_per_toolchain(world: tuple[Path, str, str]) -> None:
    tmp, catalog_url, fp_id = world
    _register()
    result = CliRunner().invoke(cli, ["stats", "--traffic", "--json", "--catalog", catalog_url,
                                      "--store", f"file://{tmp / 'store'}"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["id"] == fp_id and row["entries"] == 1
    assert row["served_not_prebuilt"] == [{"fingerprint_id": fp_id, "backend": "fake", "model": "tiny",
                                           "shape": "96x64x1", "calls": 4, "compiled_calls": 2,
                                           "hosts_compiled": 2, "compile_s": 60.0}]
    plain = CliRunner().invoke(cli, ["stats", "--catalog", catalog_url])
    assert "served" not in plain.stdout, "without --traffic, stats reads no store"


def test_the_dashboard_shows_the_table(world: tuple[Path, str, str]) -> None:
    tmp, catalog_url, fp_id = world
    with Catalog.open(catalog_url) as catalog:
        app = create_app(catalog, traffic_view(catalog, f"file://{tmp / 'store'}", 7 * 86_400))
        with TestClient(app) as client:
            page = client.get("/").text
    assert f'data-fp="{fp_id}"' in page and 'data-shape="96x64x1"' in page
    assert 'class="trow" data-model="tiny" data-shape="64x64x1"' not in page, "the prebuilt shape is not listed"
    assert "from 2 miss reports of the last 7d" in page

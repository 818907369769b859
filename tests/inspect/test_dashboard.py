"""The dashboard's pages through its ASGI app (httpx, no socket), on SQLite and Postgres: the matrix is the
catalog, filters and pages narrow it, the queue and publishes show, and a bad query string is a 400."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from cachekeeper.catalog import Catalog
from cachekeeper.dashboard.app import create_app
from cachekeeper.format.spec import EntrySpec
from tests.inspect.helpers import HOST, OTHER, captured, manifest, publish, specs, write_config


class Cells(HTMLParser):
    """(model, shape) -> status of every matrix cell on a page, plus the captured row's set count."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.cells: dict[tuple[str, str], str] = {}
        self.captured: int | None = None
        self._model = ""
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "mrow":
            self._model = str(a["data-model"])
        elif tag == "td" and a.get("data-shape"):
            self.cells[(self._model, str(a["data-shape"]))] = str(a["data-status"])
        elif tag == "td" and a.get("data-sets"):
            self.captured = int(str(a["data-sets"]))


@dataclass
class Dash:
    client: TestClient
    catalog: Catalog
    specs: list[EntrySpec]

    def get(self, url: str, status: int = 200) -> str:
        response = self.client.get(url)
        assert response.status_code == status, response.text
        return response.text


@pytest.fixture
def dash(catalog_url: str, tmp_path: Path) -> Iterator[Dash]:
    tiny64, tiny128, small64, small128 = all_specs = specs(write_config(tmp_path))
    with Catalog.open(catalog_url, auto_migrate=True) as catalog:
        publish(catalog, None, manifest(tiny64, HOST, seconds=12), manifest(tiny128, HOST, size=2_500_000),
                manifest(tiny64, OTHER), manifest(small64, OTHER), manifest(small128, OTHER), captured(HOST))
        with TestClient(create_app(catalog), raise_server_exceptions=False) as client:
            yield Dash(client, catalog, all_specs)


def expected_cells(catalog: Catalog, fp_id: str, all_specs: list[EntrySpec]) -> dict[tuple[str, str], str]:
    """What the matrix must show, from the catalog's own rows: built here, else missing."""
    built = {r.name for r in catalog.find(fingerprint_id=fp_id)}
    return {(s.model, s.shape.label()): "built" if s.key in built else "missing" for s in all_specs}


def test_the_matrix_is_the_catalog_for_each_toolchain(dash: Dash) -> None:
    for fp in (HOST, OTHER):
        page = Cells(dash.get(f"/?fp={fp.id[:8]}"))
        assert page.cells == expected_cells(dash.catalog, fp.id, dash.specs)
    assert Cells(dash.get(f"/?fp={HOST.id}")).captured == 1
    assert Cells(dash.get(f"/?fp={OTHER.id}")).captured is None
    html = dash.get(f"/?fp={HOST.id}")
    assert "2.5 MB" in html and "12s" in html                # sizes and build times in the cells


def test_filters_and_pages_narrow_the_matrix(dash: Dash) -> None:
    assert set(Cells(dash.get(f"/?fp={HOST.id}&model=small")).cells) == {("small", "64x64x1"), ("small", "128x64x1")}
    missing = Cells(dash.get(f"/?fp={HOST.id}&status=missing"))
    assert missing.cells == {("small", "64x64x1"): "missing", ("small", "128x64x1"): "missing"}
    assert Cells(dash.get(f"/?fp={OTHER.id}&status=missing")).cells == {("tiny", "128x64x1"): "missing"}
    only_captured = Cells(dash.get(f"/?fp={HOST.id}&status=captured"))
    assert only_captured.cells == {} and only_captured.captured == 1
    first = dash.get(f"/?fp={HOST.id}&per=1")
    assert {m for m, _ in Cells(first).cells} == {"small"} and 'id="next"' in first
    second = dash.get(f"/?fp={HOST.id}&per=1&page=2")
    assert {m for m, _ in Cells(second).cells} == {"tiny"} and 'id="next"' not in second and 'id="prev"' in second


def test_the_queue_the_publishes_and_a_diff_show(dash: Dash) -> None:
    dash.catalog.enqueue([(HOST.id, "a" * 32, "{}"), (HOST.id, "b" * 32, "{}")])
    dash.catalog.claim("worker-7", lease_s=600)
    html = dash.get(f"/?fp={HOST.id}")
    assert "pending: 1" in html and "running: 1" in html and "worker-7" in html and "s left" in html
    publishes = html[html.index("Recent publishes"):]               # this toolchain's, newest first
    assert "tiny/transformer fake:full 128x64x1" in publishes and "captured/0000000000000000" in publishes
    assert "small/unet" not in publishes
    diff = dash.get(f"/diff?a={HOST.id}&b={OTHER.id[:5]}&workers=2")
    assert "<td class=\"mono\">toolchain</td><td>1</td><td>2</td>" in diff
    assert "Built for A, not for B (B must rebuild): 1 entries" in diff
    assert "Built for B, not for A: 2 entries" in diff


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)    # parsing happens before any SQL
@pytest.mark.parametrize("query", [
    "page=abc", "page=0", "page=-1", "per=100000", "status=bogus", "fp=xyz", "fp=" + "a" * 17, "nope=1",
    "page=1&page=2", "model=%ff", "=&&", "model=%00", "a&b",
])
def test_a_query_string_that_does_not_parse_is_a_400(dash: Dash, query: str) -> None:
    response = dash.client.get(f"/?{query}")
    assert response.status_code == 400, response.text
    assert response.text.startswith("400 bad request: ")


def test_diff_and_fingerprint_errors_are_4xx_never_500(dash: Dash) -> None:
    assert dash.client.get("/diff").status_code == 400
    assert dash.client.get("/diff?a=1&b=zz").status_code == 400
    assert dash.client.get("/diff?a=1&b=2&workers=0").status_code == 400
    assert dash.client.get(f"/diff?a=ffffffffffffff00&b={HOST.id}").status_code == 404
    assert dash.client.get("/?fp=ffffffffffffff00").status_code == 404
    assert dash.client.post("/").status_code == 405                     # read-only: GET only


def test_the_views_explain_and_diff_read_agree_with_the_catalog(dash: Dash) -> None:
    from cachekeeper.catalog import views

    tiny64, tiny128, *_ = dash.specs
    with views.reading(dash.catalog) as conn:
        assert {fp.id for fp in views.holders(conn, tiny64.key)} == {HOST.id, OTHER.id}
        assert views.holders(conn, "captured/" + "0" * 16) == []           # a captured set is no entry
        assert [e.key for e in views.entries_only_in(conn, HOST.id, OTHER.id)] == [tiny128.key]
        assert views.fingerprint_ids(conn, HOST.id[:3]) == [HOST.id] or HOST.id[:3] == OTHER.id[:3]


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_a_catalog_that_fails_under_the_page_is_a_503_line(dash: Dash) -> None:
    dash.catalog.downgrade("base")                                       # the tables vanish under the app
    response = dash.client.get("/")
    assert response.status_code == 503 and response.text.startswith("503 catalog unavailable: catalog sqlite:")

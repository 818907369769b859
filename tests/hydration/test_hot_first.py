"""Hot first: with `--ready-after N` the N entries placed first are the hottest: the config's `priority:`,
then the calls this toolchain's recent miss reports counted, then the dest's own last use, then the config's
order. Reports are advice: a store that cannot give them leaves one warning line and the config's order."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cachekeeper.config import load_config
from cachekeeper.hydration import hot, usage
from cachekeeper.hydration.destdir import claim_layout
from cachekeeper.reports.miss import Report, Row, write_report
from cachekeeper.stores.file import FileStore
from tests.fakes import ENABLE

from .helpers import invoke_hydrate as _invoke

CONFIG = """version: 1
hydrate: {{{hydrate}}}
defaults: {{backends: [fake], shapes: ['64x64x1', '128x128x1', '256x256x1']}}
models:
  - name: m
    path: {model}
"""


def _row(height: int, calls: int, model: str = "m") -> Row:
    return Row(model=model, height=height, width=height, batch=1, guidance=None, max_sequence_length=None,
               calls=calls, compiled=0, compile_s=0.0, wall_s=1.0)


def test_the_order_is_priority_then_calls_then_last_use_then_the_given_order() -> None:
    names = ["a", "b", "c", "d", "e"]
    assert hot.order(names, {}, {}, {}) == names
    assert hot.order(names, {}, {"c": 3, "e": 9}, {}) == ["e", "c", "a", "b", "d"]
    assert hot.order(names, {"d": 1}, {"c": 3, "e": 9}, {}) == ["d", "e", "c", "a", "b"]
    assert hot.order(names, {}, {"c": 3}, {"b": 10.0, "a": 20.0, "c": 1.0}) == ["c", "a", "b", "d", "e"]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)), max_size=12))
def test_the_order_is_a_permutation_sorted_by_its_three_keys(keys: list[tuple[int, int, int]]) -> None:
    names = [f"e{i}" for i in range(len(keys))]
    prio = {n: k[0] for n, k in zip(names, keys, strict=True)}
    calls = {n: k[1] for n, k in zip(names, keys, strict=True)}
    used = {n: float(k[2]) for n, k in zip(names, keys, strict=True)}
    got = hot.order(names, prio, calls, used)
    assert sorted(got) == sorted(names)
    ranks = [(-prio[n], -calls[n], -used[n], names.index(n)) for n in got]
    assert ranks == sorted(ranks)


def test_calls_count_by_shape_and_reach_every_entry_of_that_shape() -> None:
    shapes = {"x": ("m", 64, 64, 1), "y": ("m", 64, 64, 1), "z": ("m", 128, 128, 1)}
    rows = [_row(64, 2), _row(64, 5), _row(128, 1, model="other"), _row(256, 7)]
    assert hot.calls_by_entry(rows, shapes) == {"x": 7, "y": 7}


def test_a_guidance_entry_counts_the_calls_of_half_its_batch_as_traffic_does() -> None:
    """Classifier-free guidance compiles 2 x the images per prompt: a batch-2 entry serves batch-1 calls."""
    shapes = {"cfg": ("m", 64, 64, 2), "plain": ("m", 64, 64, 1)}
    assert hot.calls_by_entry([_row(64, 3)], shapes) == {"cfg": 3, "plain": 3}


@pytest.fixture(autouse=True)
def _fake_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)


def _setup(tmp: Path, monkeypatch: pytest.MonkeyPatch, hydrate: str = "") -> tuple[Path, dict[int, str], str]:
    """(config, entry name per height, this host's fake toolchain id)."""
    from cachekeeper.hydration.request import resolve_request

    (tmp / "model").mkdir()
    path = tmp / "ck.yaml"
    path.write_text(CONFIG.format(hydrate=hydrate, model=tmp / "model"))
    monkeypatch.setenv("FAKE_SHARED_DIR", str(tmp / "sh"))   # as _invoke runs the CLI
    config = load_config(path)
    names = {e.spec.shape.height: e.spec.key for e in config.entries()}
    fp = resolve_request(config=config, dest=tmp / "d").toolchain.fingerprint.id
    return path, names, fp


def _report(store: FileStore, fp: str, rows: list[Row], end: float | None = None) -> None:
    end = time.time() if end is None else end
    write_report(store, Report(fp, "fake", "0" * 16, end - 60, end, tuple(rows)))


def _ready_first(tmp: Path, config: Path, store: Path, *extra: str) -> Any:
    return _invoke(tmp, "--config", str(config), "--store", str(store), "--dest", str(tmp / "d"),
                   "--ready-after", "1", *extra)


def test_the_shape_recent_reports_served_most_is_placed_first(
        tmp_path: Path, seen: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    config, names, fp = _setup(tmp_path, monkeypatch)
    store = FileStore(tmp_path / "store")
    _report(store, fp, [_row(128, 3), _row(256, 40)])
    _report(store, fp, [_row(128, 50)], end=time.time() - 30 * 24 * 3600)   # a month old: not today's traffic
    _report(store, "0" * 16, [_row(64, 99)])                                 # another toolchain's traffic
    result = _ready_first(tmp_path, config, tmp_path / "store")
    assert result.exit_code == 0, result.output
    first, full = seen
    assert [p.name for p in first["pins"]] == [names[256]]
    assert [p.name for p in full["pins"]] == [names[256], names[128], names[64]]
    assert "warning: hot first" not in result.stderr


def test_hot_reports_0_reads_none_and_the_dest_s_last_use_orders_the_rest(
        tmp_path: Path, seen: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    config, names, fp = _setup(tmp_path, monkeypatch, "hot_reports: 0")
    store = FileStore(tmp_path / "store")
    _report(store, fp, [_row(256, 40)])
    claim_layout(tmp_path / "d", fp, "fake", lock_timeout=5)   # a dest an earlier boot hydrated
    served = tmp_path / "d" / fp                        # the toolchain's own dir of the dest (destdir.py)
    usage.record(served, {names[128]: [], names[64]: []})
    os.utime(served / ".cachekeeper" / "used" / f"{names[64]}.json", (1, 1))   # used long ago
    result = _ready_first(tmp_path, config, tmp_path / "store")
    assert result.exit_code == 0, result.output
    assert [p.name for p in seen[0]["pins"]] == [names[128]]


def test_reports_a_store_cannot_give_are_one_warning_and_the_config_order_stands(
        tmp_path: Path, seen: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    config, names, _ = _setup(tmp_path, monkeypatch)
    result = _ready_first(tmp_path, config, tmp_path / "no-such-store")
    assert result.exit_code == 0, result.output
    assert [p.name for p in seen[0]["pins"]] == [names[64]]
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("warning: hot first")]
    assert len(lines) == 1 and "miss reports not read" in lines[0]


def test_a_store_that_stalls_holds_the_first_entry_no_longer_than_the_budget(tmp_path: Path) -> None:
    def stalled() -> FileStore:
        time.sleep(5)
        raise AssertionError("never reached within the budget")

    t0 = time.monotonic()
    calls, warnings = hot.read_calls(stalled, "f" * 16, {"x": ("m", 64, 64, 1)}, 16, budget=0.2)
    assert time.monotonic() - t0 < 2 and calls == {} and len(warnings) == 1

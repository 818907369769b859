"""The node-scale settings where they enter (flag, env var, config line): each bad value is one `error:`
line naming its source, exit 2, before any work; good ones reach the hydrate."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.config import parse_config
from cachekeeper.errors import ConfigError
from cachekeeper.hydration.engine import HydrateReport
from tests.fakes import ENABLE

from .helpers import invoke_hydrate as _invoke

CONFIG = """version: 1
hydrate: {{{hydrate}}}
defaults: {{backends: [fake], shapes: ['64x64x1']}}
models:
  - name: cold
    path: {model}
  - name: hot
    path: {model}
    priority: {priority}
"""


def _config(tmp: Path, hydrate: str = "", priority: str = "5") -> Path:
    (tmp / "model").mkdir(exist_ok=True)
    path = tmp / "ck.yaml"
    path.write_text(CONFIG.format(hydrate=hydrate, model=tmp / "model", priority=priority))
    return path


@pytest.mark.parametrize(("args", "env", "line"), [
    (["--max-bytes", "0"], {}, "error: --max-bytes must be a byte count from 1 to 2**60 (e.g. 20G), got '0'"),
    (["--max-bytes", "-5"], {}, "error: --max-bytes must be a byte count from 1 to 2**60 (e.g. 20G), got '-5'"),
    (["--max-bytes", "nan"], {}, "error: --max-bytes must be a byte count from 1 to 2**60 (e.g. 20G), got 'nan'"),
    (["--max-bytes", "inf"], {}, "error: --max-bytes must be a byte count from 1 to 2**60 (e.g. 20G), got 'inf'"),
    (["--node-cache-max-bytes", "9999999T"], {},
     "error: --node-cache-max-bytes must be a byte count from 1 to 2**60 (e.g. 20G), got '9999999T'"),
    ([], {"CACHEKEEPER_MAX_BYTES": "lots"},
     "error: env CACHEKEEPER_MAX_BYTES must be a byte count from 1 to 2**60 (e.g. 20G), got 'lots'"),
    (["--ready-after", "0"], {}, "error: --ready-after must be a whole number from 1 to 1000000, got '0'"),
    ([], {"CACHEKEEPER_READY_AFTER": "1e9"},
     "error: env CACHEKEEPER_READY_AFTER must be a whole number from 1 to 1000000, got '1e9'"),
    ([], {"CACHEKEEPER_NODE_CACHE": " "},
     "error: env CACHEKEEPER_NODE_CACHE must name a directory, got an empty value"),
])
def test_a_bad_node_setting_is_one_error_line_naming_its_source(
        tmp_path: Path, seen: list[dict[str, Any]], args: list[str], env: dict[str, str], line: str) -> None:
    result = _invoke(tmp_path, "--config", str(_config(tmp_path)), "--dest", str(tmp_path / "d"), *args, **env)
    assert result.exit_code == 2 and not seen
    assert [ln for ln in result.stderr.splitlines() if ln.startswith("error:")] == [line]


@pytest.mark.parametrize(("hydrate", "priority", "message"), [
    ("max_bytes: 0", "5", "hydrate.max_bytes must be a byte count from 1 to 2**60"),
    ("node_cache_max_bytes: 2305843009213693952", "5", "hydrate.node_cache_max_bytes must be a byte count"),
    ("ready_after: -1", "5", "hydrate.ready_after must be at least 1, got -1"),
    ("hot_reports: -1", "5", "hydrate.hot_reports must be at least 0, got -1"),
    ("hot_reports: .nan", "5", "hydrate.hot_reports must be an integer"),
    ("hot_reports: .inf", "5", "hydrate.hot_reports must be an integer"),
    ("hot_reports: 10000001", "5", "hydrate.hot_reports must be at most 1000000, got 10000001"),
    ("hot_reports: lots", "5", "hydrate.hot_reports must be an integer"),
    ("durability: sometimes", "5", "hydrate durability must be fsync or boot or both, not 'sometimes'"),
    ("node_cache: ''", "5", "hydrate.node_cache must be a non-empty string"),
    ("", "-1", "model 'hot' priority must be at least 0, got -1"),
    ("", ".nan", "model 'hot' priority must be an integer"),
])
def test_a_bad_node_setting_in_the_config_names_its_line(tmp_path: Path, hydrate: str, priority: str,
                                                         message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)
    path = _config(tmp_path, hydrate, priority)
    with pytest.raises(ConfigError, match=r"ck\.yaml:\d+: " + message.replace("*", r"\*").replace("(", r"\(")):
        parse_config(path.read_text(), str(path))


def test_priority_orders_the_pins_and_ready_after_hydrates_the_hot_ones_first(
        tmp_path: Path, seen: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)
    dest = tmp_path / "d"
    (dest / ".cachekeeper").mkdir(parents=True)
    (dest / ".cachekeeper" / "ready").write_text("{}")     # an earlier run's: it must not speak for this one
    markers_at_start = []
    real = sys.modules["cachekeeper.hydration.engine"].hydrate

    def watch(*args: Any, **kw: Any) -> HydrateReport:
        markers_at_start.append((dest / ".cachekeeper" / "ready").exists())
        return real(*args, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(sys.modules["cachekeeper.hydration.engine"], "hydrate", watch)
    result = _invoke(tmp_path, "--config", str(_config(tmp_path, "durability: both, node_cache: nc")),
                     "--dest", str(dest), "--ready-after", "1", "--env-file", str(tmp_path / "ck.env"))
    assert result.exit_code == 0, result.output
    first, full = seen
    assert len(first["pins"]) == 1 and len(full["pins"]) == 2 and full["pins"][0] == first["pins"][0]
    config = parse_config((tmp_path / "ck.yaml").read_text(), str(tmp_path / "ck.yaml"))
    hot = [e.spec.key for e in config.entries(models={"hot"})]
    assert [p.name for p in first["pins"]] == hot     # `priority: 5` beats the config's order
    assert full["durability"] == "both" and full["node_cache"] == str(tmp_path / "nc")
    assert markers_at_start == [False, True]     # cleared first; written after the hot entries, before the rest
    assert (dest / ".cachekeeper" / "ready").exists() and (dest / ".cachekeeper" / "complete").exists()
    assert "export FAKE_CACHE_DIR=" in (tmp_path / "ck.env").read_text()


def test_the_flags_win_over_the_config(tmp_path: Path, seen: list[dict[str, Any]]) -> None:
    result = _invoke(tmp_path, "--config", str(_config(tmp_path, "max_bytes: 100, durability: both")),
                     "--dest", str(tmp_path / "d"), "--max-bytes", "2G", "--durability", "fsync")
    assert result.exit_code == 0, result.output
    assert seen[-1]["max_bytes"] == 2 << 30 and seen[-1]["durability"] == "fsync" and seen[-1]["node_cache"] is None


def test_ready_after_without_a_config_or_lockfile_is_one_error_line(tmp_path: Path, seen: list[dict[str, Any]]) -> None:
    result = _invoke(tmp_path, "--backend", "fake", "--store", str(tmp_path / "store"), "--dest", str(tmp_path / "d"),
                     "--ready-after", "2")
    assert result.exit_code == 2 and not seen
    assert [ln for ln in result.stderr.splitlines() if ln.startswith("error:")] == [
        "error: hot first (ready after N entries) needs the wanted entries in order: a config or a lockfile names "
        "them, a listing of the store does not"]


def _published(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(config, store) with the config's entries published for this host's fake toolchain."""
    from cachekeeper.config import load_config
    from cachekeeper.hydration.request import resolve_request
    from cachekeeper.publish.upload import publish
    from cachekeeper.stores.file import FileStore

    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("FAKE_SHARED_DIR", str(tmp / "sh"))   # as _invoke runs the CLI
    path = _config(tmp)
    config = load_config(path)
    fp = resolve_request(config=config, dest=tmp / "d").toolchain.fingerprint
    for i, entry in enumerate(config.entries()):
        root = tmp / f"built{i}"
        (root / "ab").mkdir(parents=True)
        (root / "ab" / f"{i}.neff").write_bytes(bytes([i]) * 4096)
        publish(FileStore(tmp / "store"), fingerprint=fp, spec=entry.spec, roots={"cache": root},
                include=lambda r, rel, p: True)
    return path, tmp / "store"


def test_a_node_cache_on_a_network_filesystem_is_one_error_line_and_exit_9(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.hydration import nodecache

    config, store = _published(tmp_path, monkeypatch)
    monkeypatch.setattr(nodecache, "fs_type", lambda p: "nfs4")
    result = _invoke(tmp_path, "--config", str(config), "--store", str(store), "--dest", str(tmp_path / "d"),
                     "--node-cache", str(tmp_path / "node"))
    assert result.exit_code == 9 and "Traceback" not in result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "is on nfs4, a network filesystem" in errors[0]


def test_a_node_cache_that_cannot_fit_the_entries_is_one_warning_and_the_dest_is_still_filled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fakes import served

    config, store = _published(tmp_path, monkeypatch)
    result = _invoke(tmp_path, "--config", str(config), "--store", str(store), "--dest", str(tmp_path / "d"),
                     "--node-cache", str(tmp_path / "node"), "--node-cache-max-bytes", "1")
    assert result.exit_code == 0, result.output
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "cannot fit" in warnings[0]
    assert sorted(p.name for p in served(tmp_path / "d").rglob("*.neff")) == ["0.neff", "1.neff"]


def test_hot_first_opens_one_store_for_its_reports_and_both_phases_and_reports_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each store opened builds its own SDK client (~0.1 s on S3): the reports, the hot entries and the
    rest share one, closed once at the end. The command's summary adds up what both phases fetched."""
    import json

    import cachekeeper.stores as stores
    from cachekeeper.stores.file import FileStore

    config, store = _published(tmp_path, monkeypatch)
    opened: list[str] = []
    closed: list[str] = []
    real_open = stores.open_store

    def counting(url: str | None = None, **kw: Any) -> Any:
        opened.append(str(url))
        return real_open(url, **kw)

    monkeypatch.setattr(stores, "open_store", counting)
    monkeypatch.setattr(FileStore, "close", lambda self: closed.append(self.url))
    result = _invoke(tmp_path, "--config", str(config), "--store", str(store), "--dest", str(tmp_path / "d"),
                     "--ready-after", "1", "--json")
    assert result.exit_code == 0, result.output
    assert len(opened) == 1 and len(closed) == 1
    report = json.loads(result.stdout.splitlines()[0])
    assert report["ready_seconds"] is not None
    assert report["files_fetched"] == 2 and report["bytes_fetched"] == 2 * 4096   # one entry per phase

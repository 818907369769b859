"""One setting, one path: every option of `cachekeeper hydrate` is a `HydrateOptions` field and an argument
of `cachekeeper.hydrate()` (or says why it is neither), and the config's `hydrate:` section, the flags and
the Python API settle the same settings into the same options."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import cachekeeper
from cachekeeper import api
from cachekeeper.cli.boot import hydrate as hydrate_command
from cachekeeper.config import parse_config
from cachekeeper.config.hydrate import HydrateOptions, config_keys
from cachekeeper.errors import UsageError
from cachekeeper.hydration.engine import HydrateReport
from tests.fakes import ENABLE

FIELDS = [f.name for f in dataclasses.fields(HydrateOptions)]

# Options of the command that are not hydrate settings, each with why: they name what to hydrate (the
# request, hydration/request.py) or where the command's own output goes.
NOT_SETTINGS = {
    "config_path": "the request: the config names the entries (and brings its own `hydrate:` settings)",
    "lockfile": "the request: the exact manifests to hydrate",
    "backend": "the request: which backend's toolchain",
    "models": "the request: which entries of the config",
    "shapes": "the request: which entries of the config",
    "dest": "the request: where (`cachekeeper.hydrate(dest=...)`)",
    "device": "the request: part of the toolchain's fingerprint",
    "pairs": "the request: backend options, the fingerprint's (`cachekeeper.hydrate(options=...)`)",
    "store_url": "the request: which store (`cachekeeper.hydrate(store=...)`)",
    "print_env": "the command's output: the API returns the report, `cachekeeper.env()` gives the env",
    "as_json": "the command's output on stdout",
}
# Settings without a flag, each with why.
NO_FLAG = {"hot_reports": "a fleet's tuning of hot first: the config's `hydrate.hot_reports` and the API set it"}


def _params(command: click.Command) -> list[click.Parameter]:
    return [p for p in command.params if p.name != "help"]


def unaccounted(command: click.Command) -> list[str]:
    """Options that are neither a HydrateOptions field and an API argument, nor a stated exception."""
    api_args = set(inspect.signature(api.hydrate).parameters)
    return [f"{max(p.opts, key=len)} ({p.name})" for p in _params(command)
            if p.name not in NOT_SETTINGS and not (p.name in FIELDS and p.name in api_args)]


def test_every_option_of_hydrate_is_a_setting_the_api_takes_or_says_why_not() -> None:
    assert unaccounted(hydrate_command) == []
    assert set(NOT_SETTINGS) <= {p.name for p in _params(hydrate_command)}   # no stale reasons


def test_an_option_added_without_a_setting_is_caught() -> None:
    broken = click.Command("hydrate", params=[*_params(hydrate_command), click.Option(["--dummy-knob"])])
    assert unaccounted(broken) == ["--dummy-knob (dummy_knob)"]


def test_every_setting_is_an_api_argument_and_a_flag_or_says_why_not() -> None:
    api_args = set(inspect.signature(api.hydrate).parameters)
    flags = {p.name for p in _params(hydrate_command)}
    assert [f for f in FIELDS if f not in api_args] == []
    assert [f for f in FIELDS if f not in flags and f not in NO_FLAG] == []
    assert set(NO_FLAG) <= set(FIELDS) - flags


@pytest.fixture()
def captured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[HydrateOptions]:
    """The options every hydrate (the CLI's and the API's) settles on; nothing is fetched."""
    for k, v in {**ENABLE, "FAKE_SHARED_DIR": str(tmp_path / "sh"), "CACHEKEEPER_HOME": str(tmp_path / "home")}.items():
        monkeypatch.setenv(k, v)
    seen: list[HydrateOptions] = []

    def run(req: Any, options: HydrateOptions, *args: Any) -> tuple[HydrateReport, dict[str, str]]:
        seen.append(options)
        return HydrateReport(dest=req.dest, fingerprint_id="f"), {}

    monkeypatch.setattr(api, "run_hydrate", run)
    return seen


def _config(tmp_path: Path, hydrate: str = "") -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    path = tmp_path / ("ck.yaml" if not hydrate else "ck-hydrate.yaml")
    path.write_text(f"version: 1\nhydrate: {{{hydrate}}}\ndefaults: {{backends: [fake], shapes: ['64x64x1']}}\n"
                    f"models:\n  - name: tiny\n    path: {tmp_path / 'model'}\n")
    return path


def _cli(*args: str) -> None:
    from cachekeeper.cli import _register, cli

    _register()
    result = CliRunner().invoke(cli, ["hydrate", *args])
    assert result.exit_code == 0, result.output


def test_the_config_the_flags_and_the_api_settle_the_same_settings_alike(
        captured: list[HydrateOptions], tmp_path: Path) -> None:
    node, metrics = tmp_path / "node", tmp_path / "m.prom"
    from_config = parse_config(_config(tmp_path, f"deadline: 7, best_effort: true, node_cache: {node}, "
                                                 "node_cache_max_bytes: 200G, max_bytes: 50G, durability: fsync, "
                                                 f"ready_after: 2, metrics_file: {metrics}").read_text(),
                               str(tmp_path / "ck-hydrate.yaml")).hydrate
    bare = _config(tmp_path)
    _cli("--config", str(bare), "--deadline", "7", "--best-effort", "--node-cache", str(node),
         "--node-cache-max-bytes", "200G", "--max-bytes", "50G", "--durability", "fsync", "--ready-after", "2",
         "--metrics-file", str(metrics))
    cachekeeper.hydrate(config=bare, deadline=7, best_effort=True, node_cache=node, node_cache_max_bytes="200G",
                        max_bytes=50 << 30, durability="fsync", ready_after=2, metrics_file=metrics)
    from_cli, from_api = captured
    assert from_config == from_cli == from_api
    assert from_api.max_bytes == 50 << 30 and from_api.node_cache == str(node) and from_api.deadline == 7.0


def test_settings_the_config_lacks_reach_the_options_alike_from_flags_env_and_api(
        captured: list[HydrateOptions], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, node = _config(tmp_path), str(tmp_path / "node")
    _cli("--config", str(config), "--verify", "--require-all", "--threads", "4", "--trusted-key", "ed25519:a",
         "--capture-key", "ed25519:b", "--node-cache", node, "--node-cache-link", "copy",
         "--env-file", str(tmp_path / "ck.env"), "--env-format", "systemd")
    monkeypatch.setenv("CACHEKEEPER_TRUSTED_KEYS", "ed25519:a")
    monkeypatch.setenv("CACHEKEEPER_CAPTURE_KEYS", "ed25519:b")
    monkeypatch.setenv("CACHEKEEPER_NODE_CACHE", node)
    monkeypatch.setenv("CACHEKEEPER_NODE_CACHE_LINK", "copy")
    _cli("--config", str(config), "--verify", "--require-all", "--threads", "4",
         "--env-file", str(tmp_path / "ck.env"), "--env-format", "systemd")
    cachekeeper.hydrate(config=config, verify=True, require_all=True, threads=4, trusted_keys="ed25519:a",
                        capture_keys=["ed25519:b"], node_cache=Path(node), node_cache_link="copy",
                        env_file=tmp_path / "ck.env", env_format="systemd")
    flags, env, from_api = captured
    assert flags == env == from_api
    assert from_api.trusted_keys == ("ed25519:a",) and from_api.threads == 4


def test_a_flag_or_api_argument_wins_over_the_config_and_an_unset_one_leaves_it(
        captured: list[HydrateOptions], tmp_path: Path) -> None:
    config = _config(tmp_path, "deadline: 7, max_bytes: 100, best_effort: true")
    _cli("--config", str(config), "--max-bytes", "2G")
    cachekeeper.hydrate(config=config, max_bytes="2G", best_effort=None)
    assert captured[0] == captured[1] == HydrateOptions(deadline=7.0, max_bytes=2 << 30, best_effort=True)


@pytest.mark.parametrize(("given", "message"), [
    ({"threads": 0}, r"hydrate\(threads=\.\.\.\): 0 is too small"),
    ({"max_bytes": "1.5G"}, r"hydrate\(max_bytes=\.\.\.\) must be a byte count .* \(a fraction: bytes are whole\)"),
    ({"ready_after": 0}, r"hydrate\(ready_after=\.\.\.\): 0 is too small"),
    ({"durability": "always"}, r"hydrate\(durability=\.\.\.\) must be one of fsync, boot, both, got 'always'"),
    ({"deadline": float("inf")}, r"hydrate\(deadline=\.\.\.\): inf is not finite"),
    ({"deadline": float("nan")}, r"hydrate\(deadline=\.\.\.\): nan is not a number"),
    ({"deadline": -3.0}, r"hydrate\(deadline=\.\.\.\): -3 is too small"),
    ({"threads": 10**9}, r"hydrate\(threads=\.\.\.\): 1e\+09 is past the bound of 256"),
    ({"max_bytes": -5}, r"hydrate\(max_bytes=\.\.\.\) must be a byte count from 1 to 2\*\*60"),
    ({"node_cache_max_bytes": 2**70}, r"hydrate\(node_cache_max_bytes=\.\.\.\) must be a byte count"),
    ({"hot_reports": -1}, r"hydrate\(hot_reports=\.\.\.\): -1 is too small"),
    ({"ready_after": 10**12}, r"hydrate\(ready_after=\.\.\.\): 1e\+12 is past the bound"),
    ({"best_effort": True, "require_all": True}, r"require-all .* and best effort .* contradict each other"),
])
def test_a_bad_api_setting_is_one_usage_error_naming_the_argument(given: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        HydrateOptions(**given)


def test_the_config_section_has_exactly_the_settings_docs_config_md_lists() -> None:
    assert config_keys() == ("deadline", "best_effort", "node_cache", "node_cache_max_bytes", "max_bytes",
                             "durability", "ready_after", "hot_reports", "metrics_file")

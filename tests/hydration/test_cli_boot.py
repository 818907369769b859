"""The boot hook's surface: where the deadline comes from (flag, env, config), the one JSON summary line
a boot log gets, and the progress line a terminal gets."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cachekeeper.cli.hydrate_output import progress_line, summarize
from cachekeeper.config import parse_config
from cachekeeper.config.hydrate import HydrateOptions
from cachekeeper.errors import ConfigError
from cachekeeper.hydration.engine import HydrateReport, Target
from cachekeeper.hydration.fetch import FetchStats
from tests.fakes import ENABLE

CONFIG = """
version: 1
hydrate: {{deadline: {deadline}, best_effort: true}}
defaults: {{backends: [fake], shapes: ['64x64x1']}}
models:
  - name: tiny
    path: {model}
"""


def _invoke(tmp: Path, *args: str, **env: str) -> Any:
    from cachekeeper.cli import _register, cli

    _register()
    return CliRunner().invoke(cli, ["hydrate", *args], env={**ENABLE, "FAKE_SHARED_DIR": str(tmp / "sh"),
                                                            "CACHEKEEPER_HOME": str(tmp / "home"), **env})


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    (tmp_path / "model").mkdir()
    path = tmp_path / "ck.yaml"
    path.write_text(CONFIG.format(deadline=7, model=tmp_path / "model"))
    return path


def test_the_config_sets_the_deadline_and_best_effort_and_the_flag_wins(
        config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    hydrate_module = sys.modules["cachekeeper.hydration.engine"]
    seen: list[dict[str, Any]] = []

    def spy(target: Target, options: HydrateOptions, *args: Any, **kw: Any) -> HydrateReport:
        seen.append(asdict(options))
        return HydrateReport(dest=target.dest, fingerprint_id="f", incomplete="the deadline of 7s ran out")

    monkeypatch.setattr(hydrate_module, "hydrate", spy)
    result = _invoke(tmp_path, "--config", str(config), "--dest", str(tmp_path / "d"), "--print-env")
    assert result.exit_code == 0 and "export FAKE_CACHE_DIR=" in result.stdout
    assert seen[-1]["deadline"] == 7.0 and seen[-1]["best_effort"] is True
    assert "warning: hydrate incomplete (the deadline of 7s ran out)" in result.stderr
    _invoke(tmp_path, "--config", str(config), "--dest", str(tmp_path / "d"), "--deadline", "3")
    _invoke(tmp_path, "--config", str(config), "--dest", str(tmp_path / "d"), CACHEKEEPER_DEADLINE="4")
    assert [kw["deadline"] for kw in seen[1:]] == [3.0, 4.0]


def test_a_bad_deadline_in_the_config_is_one_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"hydrate\.deadline must be positive"):
        parse_config(CONFIG.format(deadline=-1, model=tmp_path), "ck.yaml", tmp_path)


def test_a_boot_log_gets_one_json_summary_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = HydrateReport(dest=tmp_path, fingerprint_id="f", files_fetched=3, bytes_fetched=3 << 20, seconds=1.5,
                           retries=2, deadline_left=8.5, files_total=5)
    summarize(report, tty=lambda: False)
    line = capsys.readouterr().err.strip()
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["files"] == 3 and doc["bytes"] == 3 << 20 and doc["seconds"] == 1.5 and doc["mib_s"] == 2.0
    assert doc["retries"] == 2 and doc["deadline_left"] == 8.5 and doc["hydrate"] == "done"


def test_a_terminal_gets_a_progress_line_only_after_a_second(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import time

    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    show = progress_line(tty=lambda: True)
    assert show is not None and progress_line(tty=lambda: False) is None
    stats = FetchStats(files=10, bytes_received=20 << 20, files_planned=40, bytes_planned=80 << 20)
    clock[0] += 0.5
    show(stats)
    assert capsys.readouterr().err == ""  # a fast hydrate prints no progress
    clock[0] += 1.5
    show(stats)
    assert "\rhydrate: 10/40 files, 20/80 MiB, 10 MiB/s" in capsys.readouterr().err


def test_the_library_hydrate_leaves_the_collector_alone_and_the_cli_restores_it(tmp_path: Path) -> None:
    """A serving process calls `cachekeeper.hydrate` while its other threads allocate: only the CLI, whose
    process does nothing else, pauses the cyclic collector, and it restores it afterwards."""
    import gc

    from cachekeeper.cli.boot import collector_paused
    from cachekeeper.hydration import fetch

    assert "gc.disable" not in Path(fetch.__file__).read_text()
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cachekeeper.catalog import Catalog
from cachekeeper.cli import _register, cli
from cachekeeper.format.spec import EntrySpec
from cachekeeper.stores import open_store
from tests.fakes import ENABLE
from tests.inspect.helpers import HOST, OTHER, THIRD, cli_env, manifest, publish, specs, write_config


@pytest.fixture(autouse=True)
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configs name the fake backend (tests/fakes.py); in-process parsing needs it registered too."""
    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("FAKE_TOOLCHAIN", raising=False)


@dataclass
class World:
    tmp: Path
    config: Path
    catalog: str
    store: str
    tiny64: EntrySpec
    tiny128: EntrySpec
    small64: EntrySpec
    small128: EntrySpec

    def run(self, *args: str, code: int = 0) -> Result:
        _register()
        result = CliRunner().invoke(cli, list(args), env=cli_env(self.tmp, CACHEKEEPER_CATALOG=self.catalog,
                                                                 CACHEKEEPER_STORE=self.store,
                                                                 FAKE_SHARED_DIR=str(self.tmp / "shared")))
        assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.output
        assert result.exit_code == code, result.output
        return result


def one_error(result: Result) -> str:
    """Bad input: exactly an `error:` line and a `hint:` line, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), result.stderr
    return lines[0]


@pytest.fixture
def world(tmp_path: Path) -> World:
    config = write_config(tmp_path)
    tiny64, tiny128, small64, small128 = specs(config)
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    store = open_store(f"file://{tmp_path / 'store'}", create=True)
    with Catalog.open(url) as catalog:
        publish(catalog, store, manifest(tiny64, HOST, seconds=10), manifest(tiny128, HOST, seconds=20, size=20_000),
                manifest(tiny64, OTHER, seconds=30), manifest(small64, OTHER, seconds=40),
                manifest(small128, OTHER, seconds=None), manifest(small64, THIRD))
    return World(tmp_path, config, url, store.url, tiny64, tiny128, small64, small128)

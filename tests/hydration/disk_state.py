"""A host with one published entry (fake backend, file store) and its `cachekeeper` command run in-process,
for the specifications of what earlier runs left on disk (test_state_input.py, test_state_properties.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cachekeeper.config import load_config
from cachekeeper.publish.upload import publish
from cachekeeper.stores.file import FileStore
from tests.fakes import ENABLE, FakeBackend, fake_config

FILES = {f"0{i}/k{i}.neff": bytes([i + 1]) * (1000 + i) for i in range(3)}
# docs/cli.md "Exit codes": the codes a command may end with (1 is a bug, never expected)
DOCUMENTED_EXIT_CODES = {0, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12}


class Host:
    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp
        (tmp / "model").mkdir()
        self.config = tmp / "ck.yaml"
        self.config.write_text(fake_config(tmp / "model", heights="64") + "capture: publish\n")
        self.store = tmp / "store"
        self.store.mkdir()
        for name, value in {**ENABLE, "CACHEKEEPER_HOME": str(tmp / "home"), "CACHEKEEPER_STORE": f"file://{self.store}",
                            "FAKE_SHARED_DIR": str(tmp / "shared")}.items():
            monkeypatch.setenv(name, value)
        for name in ("CACHEKEEPER_CATALOG", "CACHEKEEPER_SIGNING_KEY", "CACHEKEEPER_TRUSTED_KEYS", "FAKE_TOOLCHAIN",
                     "CACHEKEEPER_DEADLINE", "CACHEKEEPER_BEST_EFFORT", "CACHEKEEPER_MAX_BYTES",
                     "CACHEKEEPER_NODE_CACHE", "CACHEKEEPER_SPOOL"):
            monkeypatch.delenv(name, raising=False)
        spec = load_config(str(self.config)).entries()[0].spec
        built = tmp / "built"
        for rel, data in FILES.items():
            (built / rel).parent.mkdir(parents=True, exist_ok=True)
            (built / rel).write_bytes(data)
        self.manifest = publish(FileStore(self.store), fingerprint=FakeBackend().fingerprint({}), spec=spec,
                                roots={"cache": built}, include=FakeBackend().include).manifest
        self.fp = FakeBackend().fingerprint({}).id

    def cli(self, *args: str) -> Result:
        from cachekeeper.cli import _register, cli

        _register()
        return CliRunner().invoke(cli, list(args), catch_exceptions=True)

    def hydrate(self, dest: Path, *extra: str) -> Result:
        return self.cli("hydrate", "--config", str(self.config), "--dest", str(dest), *extra)

    def served(self, dest: Path) -> Path:
        return dest / self.fp


def errors(result: Result) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]


def warnings(result: Result) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if ln.startswith("warning:")]


def no_traceback(result: Result) -> None:
    """Exits through the CLI's error path (or succeeds): a documented code, never an escaped exception."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in DOCUMENTED_EXIT_CODES, (result.exit_code, result.stderr)
    if result.exit_code:
        assert len(errors(result)) == 1, result.stderr


def one_error(result: Result, code: int) -> str:
    no_traceback(result)
    assert result.exit_code == code, result.stderr
    return errors(result)[0]


def intact(served: Path) -> bool:
    """Every published file is in the served dir with its published bytes."""
    return all((served / rel).is_file() and hashlib.sha256((served / rel).read_bytes()).digest()
               == hashlib.sha256(data).digest() for rel, data in FILES.items())


def exported(result: Result) -> dict[str, str]:
    return dict(ln[len("export "):].split("=", 1) for ln in result.stdout.splitlines() if ln.startswith("export "))


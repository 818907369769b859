"""A catalog URL is checked before any driver sees it (catalog/settings.py): a typo is one error line with a
did-you-mean and exit 2, never a driver's traceback or a connection attempt, and a relative `sqlite:///`
path is shown resolved. Through the real click tree, from the flag, the env var and a config alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cachekeeper.catalog import Catalog
from cachekeeper.catalog.settings import check_url
from cachekeeper.cli import _register, cli
from cachekeeper.errors import CatalogError, CatalogURLError, ConfigError


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *argv: str, **env: str) -> tuple[int, list[str]]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CACHEKEEPER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CACHEKEEPER_CATALOG", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _register()
    result = CliRunner().invoke(cli, list(argv))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output.splitlines()


TYPOS = [
    ("sqlte:///x.db", "did you mean sqlite:///x.db?"),
    ("sqlite:/x.db", "did you mean sqlite:///x.db?"),
    ("sqlite:x.db", "did you mean sqlite:///x.db?"),
    ("sqlite://rel/x.db", "did you mean sqlite:///rel/x.db?"),
    ("./catalog.db", "did you mean sqlite:///./catalog.db?"),
    ("postgress://ck@db.internal/ck", "did you mean postgresql+psycopg://ck@db.internal/ck?"),
    ("postgre://ck@db.internal/ck", "did you mean postgresql+psycopg://ck@db.internal/ck?"),
    ("postgresql+psycopg2://ck@db.internal/ck", "did you mean postgresql+psycopg://ck@db.internal/ck?"),
    ("postgres+psycopg://ck@db.internal/ck", "did you mean postgresql+psycopg://ck@db.internal/ck?"),
    ("postgresql:/ck@db.internal/ck", "did you mean postgresql+psycopg://ck@db.internal/ck?"),
    ("postgres:ck@db.internal/ck", "did you mean postgresql+psycopg://ck@db.internal/ck?"),
]


@pytest.mark.parametrize(("url", "hint"), TYPOS)
def test_a_catalog_url_typo_exits_2_with_a_did_you_mean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        url: str, hint: str) -> None:
    code, lines = run(tmp_path, monkeypatch, "ls", "--catalog", url)
    assert code == 2
    assert [line for line in lines if line.startswith(("error: ", "hint: "))] == [
        next(line for line in lines if line.startswith("error: ")), f"hint: {hint}"]
    assert sum(line.startswith("error: ") for line in lines) == 1 and f"{url!r}" in lines[0]


def test_the_env_var_is_checked_as_the_flag_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, lines = run(tmp_path, monkeypatch, "stats", CACHEKEEPER_CATALOG="sqlte:///x.db")
    assert code == 2 and lines[-1] == "hint: did you mean sqlite:///x.db?"


def test_a_password_is_never_echoed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, lines = run(tmp_path, monkeypatch, "ls", "--catalog", "postgress://ck:hunter2@db.internal/ck")
    assert code == 2 and lines[-1] == "hint: did you mean postgresql+psycopg://ck:***@db.internal/ck?"
    assert "hunter2" not in "\n".join(lines)


def test_an_unsupported_database_lists_the_supported_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, lines = run(tmp_path, monkeypatch, "ls", "--catalog", "mysql://root@localhost/ck")
    assert code == 2
    assert lines == ["error: unsupported catalog database 'mysql' in 'mysql://root@localhost/ck' "
                     "(supported: sqlite:///path, postgresql+psycopg://)",
                     "hint: use sqlite:///path/catalog.db or postgresql+psycopg://user@host/db"]


def test_a_relative_sqlite_path_is_shown_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, lines = run(tmp_path, monkeypatch, "ls", "--catalog", "sqlite:///rel/catalog.db")
    assert code == 5
    assert lines[0] == f"error: no catalog at {tmp_path}/rel/catalog.db"
    assert f"--catalog sqlite:///{tmp_path}/rel/catalog.db" in lines[1]


def test_a_relative_sqlite_catalog_opens_the_file_the_message_names(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Catalog.open("sqlite:///rel.db") as catalog:
        assert catalog.url == f"sqlite:///{tmp_path}/rel.db"
    assert (tmp_path / "rel.db").is_file()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:////abs/c.db", "sqlite+pysqlite:////a.db",
                                 "postgresql+psycopg://ck@h/ck", "postgresql://ck@h/ck", "postgres://ck:pw@h/ck?x=1",
                                 "sqlite:///file:c.db?mode=ro&uri=true"])
def test_urls_that_work_today_pass_unchanged(url: str) -> None:
    assert check_url(url, "/base") == url


def test_a_library_caller_still_catches_a_catalog_error() -> None:
    with pytest.raises(CatalogError) as caught:
        Catalog.open("sqlte:///x.db")
    assert isinstance(caught.value, CatalogURLError) and caught.value.exit_code == 2


def test_a_config_catalog_typo_names_its_line_and_the_url_meant(tmp_path: Path) -> None:
    from cachekeeper.config import load_config

    config = tmp_path / "ck.yaml"
    config.write_text("version: 1\ncatalog: sqlte:///c.db\nmodels: []\n")
    with pytest.raises(ConfigError, match=r"ck\.yaml:2: .*'sqlte'.* \(did you mean sqlite:///c\.db\?\)"):
        load_config(config)

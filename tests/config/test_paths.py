"""Relative locations resolve against the config file's directory; model folders are checked on request."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cachekeeper.config import load_config, parse_config
from cachekeeper.errors import ConfigError

from .util import minimal, parse


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_relative_paths_resolve_against_the_config_directory_not_the_cwd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "conf" / "ck.yaml", minimal(top_lines="store: ./store\ncatalog: sqlite:///../db/c.db\n"))
    monkeypatch.chdir(tmp_path)
    config = load_config("conf/ck.yaml")
    assert config.models[0].model.path == str(tmp_path / "conf" / "m")
    assert config.store == f"file://{tmp_path / 'conf' / 'store'}"
    assert config.catalog == f"sqlite:///{tmp_path / 'db' / 'c.db'}"
    assert config.source == "conf/ck.yaml"   # messages name the file as the user gave it


def test_parse_config_without_a_file_resolves_against_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_config(minimal()).models[0].model.path == str(tmp_path / "m")


def test_absolute_home_and_dotted_model_paths_are_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    paths = [parse(minimal().replace("./m", raw)).models[0].model.path
             for raw in ("/abs/m", "~/m", "../x/./m")]
    assert paths == ["/abs/m", "/home/u/m", "/x/m"]


@pytest.mark.parametrize(("store", "expected"), [
    ("file://./.cachekeeper/store", "file:///cfgdir/.cachekeeper/store"),
    ("file:///srv/store", "file:///srv/store"),
    ("relative/store", "file:///cfgdir/relative/store"),
    ("s3://bucket/prefix", "s3://bucket/prefix"),
    ("gs://bucket", "gs://bucket"),
])
def test_store_urls_name_absolute_file_paths(store: str, expected: str) -> None:
    assert parse(minimal(top_lines=f"store: {store}\n")).store == expected


@pytest.mark.parametrize(("catalog", "expected"), [
    ("sqlite:///./c.db", "sqlite:////cfgdir/c.db"),
    ("sqlite:///c.db?timeout=5", "sqlite:////cfgdir/c.db?timeout=5"),
    ("sqlite+pysqlite:///c.db", "sqlite+pysqlite:////cfgdir/c.db"),
    ("sqlite:////var/c.db", "sqlite:////var/c.db"),
    ("sqlite:///:memory:", "sqlite:///:memory:"),
    ("sqlite://", "sqlite://"),
    ("postgresql+psycopg://u@h:5432/db", "postgresql+psycopg://u@h:5432/db"),
])
def test_sqlite_catalog_paths_resolve_and_other_urls_pass_through(catalog: str, expected: str) -> None:
    assert parse(minimal(top_lines=f"catalog: '{catalog}'\n")).catalog == expected


def test_store_and_catalog_are_none_when_unset() -> None:
    config = parse(minimal())
    assert (config.store, config.catalog) == (None, None)


def test_require_model_paths_accepts_existing_folders(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    load_config(write(tmp_path / "ck.yaml", minimal())).require_model_paths()


def test_require_model_paths_names_the_path_line_of_a_missing_folder(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "ck.yaml", minimal()))
    expected = f"{tmp_path / 'ck.yaml'}:7: model 'm' path {tmp_path / 'm'} does not exist"
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        config.require_model_paths()


def test_require_model_paths_rejects_a_file_where_a_folder_belongs(tmp_path: Path) -> None:
    write(tmp_path / "m", "not a folder")
    with pytest.raises(ConfigError, match=r"path .* is not a directory$"):
        load_config(write(tmp_path / "ck.yaml", minimal())).require_model_paths()


def test_require_model_paths_skips_hub_models_and_models_filtered_out(tmp_path: Path) -> None:
    text = minimal() + "  - {name: h, hub: org/h, revision: abc}\n  - {name: n, path: ./n}\n"
    (tmp_path / "n").mkdir()
    load_config(write(tmp_path / "ck.yaml", text)).require_model_paths(models={"h", "n"})


def test_parsing_does_not_require_model_folders() -> None:
    """Hydrate parses the config on boot hosts that may not have the model yet."""
    assert not os.path.exists("/cfgdir/m")
    assert parse(minimal()).models[0].model.path == "/cfgdir/m"


def test_a_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(str(tmp_path / 'nope.yaml'))}: cannot read config: "):
        load_config(tmp_path / "nope.yaml")


def test_a_config_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "ck.yaml").write_bytes(b"version: 1\nname: \xff\n")
    with pytest.raises(ConfigError, match=r"ck\.yaml: not UTF-8 text$"):
        load_config(tmp_path / "ck.yaml")

"""Store URLs are parsed once (stores/url.py): the config's `store:` and open_store read them alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachekeeper.errors import UsageError
from cachekeeper.stores import open_store
from cachekeeper.stores.url import StoreURL, parse_store_url

from .util import minimal, parse


@pytest.mark.parametrize(("url", "expected"), [
    ("file:///srv/store", StoreURL("file", "", "/srv/store")),
    ("file://rel/store", StoreURL("file", "", "/base/rel/store")),
    ("file://./x/../store", StoreURL("file", "", "/base/store")),
    ("plain/store", StoreURL("file", "", "/base/plain/store")),
    ("s3://bucket", StoreURL("s3", "bucket", "")),
    ("s3://bucket//deep/prefix/", StoreURL("s3", "bucket", "deep/prefix")),
    ("GS://bucket/p", StoreURL("gs", "bucket", "p")),
])
def test_store_urls_parse_to_one_canonical_form(url: str, expected: StoreURL) -> None:
    assert parse_store_url(url, "/base") == expected


def test_canonical_urls_round_trip() -> None:
    for url in ("file:///srv/store", "s3://b", "s3://b/p/q", "gs://b/p"):
        assert str(parse_store_url(url)) == url


def test_home_expands_in_file_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/me")
    assert parse_store_url("~/store").path == "/home/me/store"


@pytest.mark.parametrize(("url", "message"), [
    ("ftp://x/y", "unsupported store URL scheme 'ftp' in 'ftp://x/y'"),
    ("s3:///prefix", "store 's3:///prefix' names no bucket"),
    ("gs://", "store 'gs://' names no bucket"),
    ("file://", "store 'file://' names no directory"),
])
def test_bad_store_urls_are_usage_errors_carrying_the_url(url: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_store_url(url)
    assert (caught.value.message, caught.value.url) == (message, url)
    assert caught.value.hint.startswith("use ")


def test_open_store_opens_the_directory_the_config_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = parse(minimal(top_lines=f"store: file://{tmp_path}/a/../store\n"))
    assert config.store == f"file://{tmp_path}/store"
    assert open_store(config.store).url == config.store
    assert open_store("rel").url == f"file://{tmp_path}/rel"   # the CLI's base is the cwd


def test_open_store_refuses_what_the_config_refuses() -> None:
    with pytest.raises(UsageError, match="names no bucket"):
        open_store("s3:///prefix")

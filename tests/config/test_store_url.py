"""Store URLs are parsed once (stores/url.py): the config's `store:` and open_store read them alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachekeeper.errors import UsageError
from cachekeeper.stores import StoreURL, open_store, parse_store_url

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
    ("ftp://x/y", "unsupported store URL scheme 'ftp' in 'ftp://x/y' (installed schemes: file, gs, s3)"),
    ("s3:///prefix", "store 's3:///prefix' names no bucket"),
    ("gs://", "store 'gs://' names no bucket"),
    ("file://", "store 'file://' names no directory"),
])
def test_bad_store_urls_are_usage_errors_carrying_the_url(url: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_store_url(url)
    assert (caught.value.message, caught.value.url) == (message, url)
    assert caught.value.hint.startswith(("use ", "install the package that registers ftp://"))


@pytest.mark.parametrize(("url", "meant"), [
    ("gs:/bucket", "gs://bucket"),
    ("gs:bucket/p", "gs://bucket/p"),
    ("gs//bucket", "gs://bucket"),
    ("s3:bucket", "s3://bucket"),
    ("s3:/bucket/prefix", "s3://bucket/prefix"),
    ("file:/srv/store", "file:///srv/store"),
    ("file:rel", "file://rel"),
    ("fiel:/srv/store", "file:///srv/store"),
])
def test_a_url_missing_its_slashes_is_refused_with_the_url_it_meant(url: str, meant: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_store_url(url)
    assert caught.value.exit_code == 2 and caught.value.url == url
    assert caught.value.message == f"store {url!r} looks like a mistyped {meant.partition(':')[0]}:// URL"
    assert caught.value.hint == f"did you mean {meant}? (a local directory: write ./{url})"


@pytest.mark.parametrize(("url", "meant"), [
    ("gcs://bucket/p", "gs://bucket/p"),
    ("S3A://bucket", "s3://bucket"),
    ("fiel:///srv/store", "file:///srv/store"),
    ("flie://rel", "file://rel"),
])
def test_a_misspelt_scheme_lists_the_installed_ones_and_suggests_the_closest(url: str, meant: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_store_url(url)
    assert caught.value.message.endswith("(installed schemes: file, gs, s3)")
    assert caught.value.hint == f"did you mean {meant}?"


@pytest.mark.parametrize("path", ["data:2024/store", "./gs:/bucket", "runs//store", "a/s3:b"])
def test_a_path_that_only_contains_a_colon_or_double_slash_is_still_a_directory(path: str) -> None:
    assert parse_store_url(path, "/base") == StoreURL("file", "", os.path.normpath(f"/base/{path}"))


def test_open_store_opens_the_directory_the_config_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = parse(minimal(top_lines=f"store: file://{tmp_path}/a/../store\n"))
    assert config.store == f"file://{tmp_path}/store"
    assert open_store(config.store).url == config.store
    assert open_store("rel").url == f"file://{tmp_path}/rel"   # the CLI's base is the cwd


def test_open_store_refuses_what_the_config_refuses() -> None:
    with pytest.raises(UsageError, match="names no bucket"):
        open_store("s3:///prefix")


def test_parsing_a_cloud_url_imports_no_sdk() -> None:
    """A config naming an S3 or GCS store is read without the SDK: only opening the store loads it."""
    code = ("import sys; from cachekeeper.stores import parse_store_url; "
            "assert str(parse_store_url('s3://b/p')) == 's3://b/p' and str(parse_store_url('gs://b')) == 'gs://b'; "
            "print(sorted(m for m in ('botocore', 'boto3', 'google.cloud.storage', 'cachekeeper.stores.s3', "
            "'cachekeeper.stores.gcs') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(("url", "error", "hint"), [
    ("gs:/bucket", "store 'gs:/bucket' looks like a mistyped gs:// URL",
     "did you mean gs://bucket? (a local directory: write ./gs:/bucket)"),
    ("file:/srv/store", "store 'file:/srv/store' looks like a mistyped file:// URL",
     "did you mean file:///srv/store? (a local directory: write ./file:/srv/store)"),
    ("s3:bucket", "store 's3:bucket' looks like a mistyped s3:// URL",
     "did you mean s3://bucket? (a local directory: write ./s3:bucket)"),
    ("gcs://bucket", "unsupported store URL scheme 'gcs' in 'gcs://bucket' (installed schemes: file, gs, s3)",
     "did you mean gs://bucket?"),
])
@pytest.mark.parametrize("source", ["--store", "CACHEKEEPER_STORE"])
def test_a_store_url_typo_through_the_cli_is_one_error_with_a_did_you_mean_and_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, error: str, hint: str, source: str) -> None:
    from click.testing import CliRunner

    from cachekeeper.cli import _register, cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CACHEKEEPER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CACHEKEEPER_STORE", raising=False)
    argv = ["verify", "--store", url] if source == "--store" else ["verify"]
    if source != "--store":
        monkeypatch.setenv(source, url)
    _register()
    result = CliRunner().invoke(cli, argv)
    assert (result.exit_code, result.output.splitlines()) == (2, [f"error: {error}", f"hint: {hint}"])


def test_the_installed_schemes_are_the_ones_pyproject_registers() -> None:
    """cachekeeper's own stores are entry points like a plugin's: a venv installed before a scheme was added
    lacks it (rerun `scripts/setup test`, which reinstalls the package's metadata)."""
    import tomllib

    from cachekeeper.stores import installed_schemes

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert installed_schemes() == sorted(pyproject["project"]["entry-points"]["cachekeeper.stores"])


def test_with_no_store_registered_the_error_says_to_reinstall(monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.stores import schemes

    monkeypatch.setattr(schemes, "_registered", dict)
    with pytest.raises(UsageError) as caught:
        parse_store_url("/srv/store")
    assert caught.value.message == "unsupported store URL scheme 'file' in '/srv/store' (installed schemes: none)"
    assert caught.value.hint.startswith("cachekeeper's package metadata registers no store: reinstall")


def test_a_store_whose_module_cannot_be_imported_is_one_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a cloud scheme says without its SDK: a LazyStore's import fails when the store is opened."""
    from cachekeeper.stores import schemes
    from cachekeeper.stores.base import LazyStore

    monkeypatch.setattr(schemes, "_registered", lambda: {"lazy": []})
    monkeypatch.setattr(schemes, "store_scheme", lambda scheme: LazyStore("ck_no_such_module:Store"))
    with pytest.raises(UsageError) as caught:
        open_store("lazy://bucket/p")
    assert caught.value.message == "the lazy:// store cannot be loaded: No module named 'ck_no_such_module'"
    assert caught.value.url == "lazy://bucket/p"

"""A broken store configuration fails with the right one-line error (and so the right CLI hint), fast.

Each case is checked on every operation a command might start with: whichever runs first must say
what is wrong, not surface as a generic error or an ObjectNotFound.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import pytest

from cachekeeper.errors import StoreAuthError, StoreError, StoreNotFound, StoreUnreachable
from cachekeeper.stores import Store, open_store

FAST = 10.0  # seconds: a dead endpoint must not hang a boot for botocore's or google's default minutes


def _ops(tmp_path: Path) -> dict[str, Callable[[Store], object]]:
    src = tmp_path / "src"
    src.write_bytes(b"x")
    return {
        "check": lambda s: s.check(),
        "put_bytes": lambda s: s.put_bytes("k", b"x"),
        "put_file": lambda s: s.put_file("k", src),
        "get_bytes": lambda s: s.get_bytes("k"),
        "get_range": lambda s: s.get_range("k", 0, 1),
        "size": lambda s: s.size("k"),
        "list": lambda s: list(s.list()),
        "delete": lambda s: s.delete("k"),
    }


OPS = ["check", "put_bytes", "put_file", "get_bytes", "get_range", "size", "list", "delete"]


def _fails_with(store: Store, op: Callable[[Store], object], expected: type[StoreError]) -> StoreError:
    with pytest.raises(StoreError) as info:
        op(store)
    assert type(info.value) is expected, f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    assert "\n" not in message and store.url in message, message
    assert info.value.url == store.url, "the store's URL travels as a field, not only in the message"
    return info.value


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _other_bucket(url: str, bucket: str) -> str:
    return url.replace(f"//{urlparse(url).netloc}/", f"//{bucket}/", 1)


# --- S3 and GCS ------------------------------------------------------------------------------------


@pytest.mark.services
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("url_fixture", ["s3_store_url", "gcs_store_url"], ids=["s3", "gcs"])
def test_missing_bucket_is_store_not_found(request: pytest.FixtureRequest, tmp_path: Path, url_fixture: str,
                                           op: str) -> None:
    store = open_store(_other_bucket(request.getfixturevalue(url_fixture), "ck-no-such-bucket"))
    _fails_with(store, _ops(tmp_path)[op], StoreNotFound)


# --- S3 --------------------------------------------------------------------------------------------


@pytest.mark.services
@pytest.mark.parametrize("op", OPS)
def test_s3_wrong_secret_is_an_auth_error(s3_store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          op: str) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    _fails_with(open_store(s3_store_url), _ops(tmp_path)[op], StoreAuthError)


@pytest.mark.services
@pytest.mark.parametrize("op", ["check", "put_bytes", "get_bytes", "list"])
def test_s3_unknown_access_key_is_an_auth_error(s3_store_url: str, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path, op: str) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDNOSUCHKEY")
    _fails_with(open_store(s3_store_url), _ops(tmp_path)[op], StoreAuthError)


@pytest.mark.parametrize("op", ["check", "put_bytes", "get_bytes", "list"])
def test_s3_without_any_credentials_is_an_auth_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     op: str) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")  # never dialled
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    _fails_with(open_store("s3://some-bucket/cache"), _ops(tmp_path)[op], StoreAuthError)


@pytest.mark.parametrize("op", ["check", "put_bytes", "get_bytes", "size", "list"])
def test_s3_unreachable_endpoint_is_store_unreachable_within_seconds(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, op: str) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    started = time.monotonic()
    _fails_with(open_store("s3://some-bucket/cache"), _ops(tmp_path)[op], StoreUnreachable)
    assert time.monotonic() - started < FAST


def test_s3_unknown_profile_is_an_auth_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    _fails_with(open_store("s3://some-bucket/cache"), lambda s: s.check(), StoreAuthError)


# --- GCS -------------------------------------------------------------------------------------------
# fake-gcs-server does no auth, so bad credentials are shown by their absence (no ADC at all).


@pytest.mark.parametrize("op", ["check", "put_bytes", "get_bytes", "size", "list"])
def test_gcs_unreachable_emulator_is_store_unreachable_within_seconds(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, op: str) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{_closed_port()}")
    started = time.monotonic()
    _fails_with(open_store("gs://some-bucket/cache"), _ops(tmp_path)[op], StoreUnreachable)
    assert time.monotonic() - started < FAST


@pytest.mark.parametrize("op", ["check", "put_bytes", "get_bytes"])
def test_gcs_without_application_default_credentials_is_an_auth_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, op: str) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    # A named but missing key file makes google.auth fail at once, before any metadata-server probe.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing-key.json"))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "test")
    _fails_with(open_store("gs://some-bucket/cache"), _ops(tmp_path)[op], StoreAuthError)

"""The team setup through the real CLI: S3 (SeaweedFS) or GCS (fake-gcs-server) plus a Postgres catalog,
and the one-line errors for credentials and connectivity. Servers come from tests/harness."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.cli_env import Env, one_error_line
from tests.fakes import served

pytestmark = pytest.mark.services


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_prebuild_to_s3_with_a_postgres_catalog_then_hydrate_without_the_database(
        s3_store_url: str, postgres_url: str, tmp_path: Path) -> None:
    env = Env(tmp_path)  # after the fixture: inherits its AWS_* environment
    not_migrated = one_error_line(env.run("prebuild", str(env.config), "--store", s3_store_url,
                                          "--catalog", postgres_url, ok=False))
    assert "db upgrade" in env.run("prebuild", str(env.config), "--store", s3_store_url, "--catalog",
                                   postgres_url, ok=False).stderr and "revision" in not_migrated
    env.run("db", "upgrade", "--catalog", postgres_url)
    env.run("prebuild", str(env.config), "--store", s3_store_url, "--catalog", postgres_url)
    assert len([json.loads(x) for x in env.run("ls", "--catalog", postgres_url, "--json").stdout.splitlines()]) == 2
    env.run("coverage", str(env.config), "--catalog", postgres_url)
    dest = tmp_path / "dest"
    env.run("hydrate", "--config", str(env.config), "--store", s3_store_url, "--dest", str(dest),
            CACHEKEEPER_CATALOG="postgresql+psycopg://nobody@127.0.0.1:1/none")  # the boot path never asks it
    assert (served(dest) / "large.bin").stat().st_size == 5 << 20
    env.run("verify", "--store", s3_store_url, "--deep")


def test_prebuild_to_gcs_then_hydrate(gcs_store_url: str, tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.run("prebuild", str(env.config), "--store", gcs_store_url, "--no-catalog")
    dest = tmp_path / "dest"
    env.run("hydrate", "--config", str(env.config), "--store", gcs_store_url, "--dest", str(dest))
    assert len(list(served(dest).glob("0?/k*.neff"))) == 12
    assert json.loads(env.run("hydrate", "--config", str(env.config), "--store", gcs_store_url, "--dest",
                              str(dest), "--json").stdout)["noop"]


def test_wrong_s3_credentials_are_one_line_naming_the_store(s3_store_url: str, tmp_path: Path) -> None:
    env = Env(tmp_path)
    err = one_error_line(env.run("prebuild", str(env.config), "--store", s3_store_url, "--no-catalog", ok=False,
                                 AWS_SECRET_ACCESS_KEY="wrong"))
    assert s3_store_url.split("/")[2] in err


def test_a_missing_bucket_is_one_line(s3_store_url: str, tmp_path: Path) -> None:
    env = Env(tmp_path)
    err = one_error_line(env.run("hydrate", "--config", str(env.config), "--store", "s3://no-such-bucket/x",
                                 "--dest", str(tmp_path / "d"), ok=False))
    assert "no-such-bucket" in err


def test_an_unreachable_s3_endpoint_is_one_line(s3_store_url: str, tmp_path: Path) -> None:
    env = Env(tmp_path)
    proc = env.run("hydrate", "--config", str(env.config), "--store", s3_store_url, "--dest", str(tmp_path / "d"),
                   ok=False, AWS_ENDPOINT_URL=f"http://127.0.0.1:{closed_port()}")
    assert "unreachable" in one_error_line(proc).lower() or "connect" in one_error_line(proc).lower()


def test_an_unreachable_catalog_is_one_line(tmp_path: Path) -> None:
    env = Env(tmp_path)
    url = f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/postgres"
    err = one_error_line(env.run("prebuild", str(env.config), "--catalog", url, ok=False))
    assert "127.0.0.1" in err

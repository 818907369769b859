"""A throwaway Postgres 15 cluster for the session (DESIGN §3), and a fresh database per test.

The server starts on first use, listens on 127.0.0.1 only, runs with fsync off, and is stopped with
`pg_ctl stop -m immediate` (killed by its postmaster PID if that fails) and deleted at session end,
also when a test or the start itself fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.process import free_port  # tests import it from here too

PG_BIN = Path(os.environ.get("CACHEKEEPER_PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_USER = "postgres"


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    root: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/{database}"

    def dsn(self, database: str = "postgres") -> str:
        return f"host={self.host} port={self.port} user=postgres dbname={database}"


def _as_postgres(args: list[str]) -> list[str]:
    # Postgres refuses to run as root; as any other user it runs as that user.
    return ["runuser", "-u", PG_USER, "--", *args] if os.geteuid() == 0 else args


def _run(args: list[str]) -> None:
    proc = subprocess.run(_as_postgres(args), capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")


def _stop(root: Path) -> None:
    """Stop the postmaster whose PID file is under `root`, by that PID if pg_ctl cannot."""
    data = root / "data"
    pid_file = data / "postmaster.pid"
    if not pid_file.exists():
        return
    with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
        _run([str(PG_BIN / "pg_ctl"), "-D", str(data), "stop", "-m", "immediate", "-w"])
    if pid_file.exists():
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)


def _start(root: Path) -> PostgresServer:
    data = root / "data"
    _run([str(PG_BIN / "initdb"), "-D", str(data), "-U", PG_USER, "-A", "trust", "-E", "UTF8",
          "--locale=C.UTF-8", "--no-sync"])
    last: Exception | None = None
    for _ in range(3):  # the free port can be taken between probe and bind; try another
        port = free_port()
        opts = f"-p {port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off -c full_page_writes=off"
        try:
            _run([str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-t", "30",
                  "-o", opts, "start"])
            return PostgresServer("127.0.0.1", port, root)
        except RuntimeError as exc:
            last = exc
            _stop(root)
    raise RuntimeError(f"postgres did not start: {last}; log: {_log_tail(root)}")


def _log_tail(root: Path) -> str:
    try:
        return (root / "log").read_text(errors="replace")[-1500:]
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """A throwaway cluster in its own top-level temp dir (the postgres user must be able to enter it),
    stopped and deleted on exit. The session fixture and the benchmarks share it."""
    root = Path(tempfile.mkdtemp(prefix="ck-pg-"))
    try:
        if os.geteuid() == 0:
            pw = pwd.getpwnam(PG_USER)
            os.chown(root, pw.pw_uid, pw.pw_gid)
        yield _start(root)
    finally:
        _stop(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    if not (PG_BIN / "pg_ctl").exists():
        pytest.fail(f"Postgres 15 binaries not found in {PG_BIN}; install them with `apt-get install postgresql`"
                    " (or set CACHEKEEPER_PG_BIN)", pytrace=False)
    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A URL to an empty database of its own, dropped (connections and all) after the test."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.url(name)
    finally:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _catalogs_database(postgres_server: PostgresServer) -> str:
    import psycopg

    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute('CREATE DATABASE "catalogs"')
    return "catalogs"


@pytest.fixture
def postgres_schema_url(postgres_server: PostgresServer, _catalogs_database: str) -> Iterator[str]:
    """A URL whose search_path is an empty schema of its own, dropped after the test.

    As isolated as a fresh database for everything in the catalog (tables, version table), and ~100x
    cheaper: CREATE DATABASE copies a template (0.5-1 s on a busy 2-core box), CREATE SCHEMA does not.
    """
    import psycopg

    name = f"s_{uuid.uuid4().hex[:12]}"
    dsn = postgres_server.dsn(_catalogs_database)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield f"{postgres_server.url(_catalogs_database)}?options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SET lock_timeout = '10s'")   # a leaked open transaction fails the test, not hangs it
            admin.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every catalog test runs on the embedded SQLite file and on a real Postgres (a schema of its own)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    url: str = request.getfixturevalue("postgres_schema_url")
    return url

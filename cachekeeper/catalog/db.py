"""Engines, URLs, error translation and Alembic migrations for the catalog database.

Supported: `sqlite:///path` (embedded default) and `postgresql+psycopg://` (`postgresql://` and
`postgres://` are taken to mean psycopg 3). Every SQLAlchemy error leaves this package as a
`CatalogError` subclass whose one-line message names the URL with its password masked.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from ..errors import CatalogError, CatalogNotMigrated, CatalogUnreachable
from .settings import (
    CONNECT_TIMEOUT_S,
    SQLITE_BUSY_TIMEOUT_S,
    VERSION_TABLE,
    check_url,
    heads,
    migrations_dir,
    revisions,
)

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

# Alembic is imported only to migrate: reading a catalog (ls, stats, coverage, hydrate's lookups) checks
# its revision against the scripts' own `revision`/`down_revision` lines, without loading Alembic.

# Any constant works: it serializes concurrent `db upgrade` runs (N workers starting at once).
_PG_MIGRATION_LOCK = 0x636B6D67

# Execution option read by the SQLite "begin" hook: take the write lock up front (BEGIN IMMEDIATE).
WRITE = "cachekeeper_write"


def parse_url(url: str) -> URL:
    url = check_url(url)   # typos (exit 2, did-you-mean) and a relative SQLite path, resolved
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise CatalogError(f"invalid catalog URL {url!r}",
                           "use sqlite:///path/catalog.db or postgresql+psycopg://user@host/db", url=url) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise CatalogError(f"unsupported catalog database {mask(parsed)}",
                           "use sqlite:///path/catalog.db or postgresql+psycopg://user@host/db", url=mask(parsed))
    return parsed


def mask(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return lines[0] if lines else type(orig).__name__


def translate(exc: SQLAlchemyError, url: str) -> CatalogError:
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return CatalogUnreachable(f"lost connection to catalog {url}: {_first_line(exc)}", url=url)
    return CatalogError(f"catalog {url}: {_first_line(exc)}", url=url)


@contextlib.contextmanager
def errors(url: str) -> Iterator[None]:
    try:
        yield
    except SQLAlchemyError as exc:
        raise translate(exc, url) from exc


def make_engine(url: URL) -> Engine:
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:      # fail in seconds, not minutes, when the host is down
        args["connect_timeout"] = CONNECT_TIMEOUT_S
    if "application_name" not in url.query:
        args["application_name"] = "cachekeeper"
    return create_engine(url, connect_args=args, pool_pre_ping=True)


def _sqlite_engine(url: URL) -> Engine:
    if url.database and url.database != ":memory:":
        try:
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CatalogUnreachable(f"cannot create catalog directory for {mask(url)}: {exc.strerror}",
                                     url=mask(url), path=str(Path(url.database).parent)) from None
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    # pysqlite's own transaction handling defers BEGIN and cannot do BEGIN IMMEDIATE; take it over
    # (SQLAlchemy's documented recipe) so writers lock before reading and never deadlock-upgrade.
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        dbapi_conn.execute("PRAGMA foreign_keys=ON")
        dbapi_conn.execute("PRAGMA journal_mode=WAL")   # readers (hydrate) never wait for a writer
        # WAL + NORMAL: a commit survives a killed process, and only a power loss can drop the last few.
        # The catalog is an index that `catalog rebuild` restores from the store, so an fsync per
        # commit (3+ per built entry) is not worth its latency on a busy disk.
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE) else "BEGIN")

    return engine


def connect(engine: Engine, url: str) -> Connection:
    """A pooled connection; failing to get one means the database is unreachable, whatever the driver says."""
    try:
        return engine.connect()
    except DBAPIError as exc:
        raise CatalogUnreachable(f"cannot connect to catalog {url}: {_first_line(exc)}", url=url) from exc
    except SQLAlchemyError as exc:
        raise translate(exc, url) from exc


# --- migrations --------------------------------------------------------------------------------------


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head() -> str:
    found = heads()
    assert len(found) == 1, f"migrations must have one head revision, not {sorted(found)}"
    return found.pop()


def known(revision: str) -> bool:
    return revision in revisions()


def current(conn: Connection) -> str | None:
    if not conn.dialect.has_table(conn, VERSION_TABLE):
        return None
    return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def migrate(engine: Engine, url: str, revision: str, *, down: bool) -> None:
    """Run Alembic in one transaction of ours: all or nothing, one migrator at a time."""
    with connect(engine, url) as conn, errors(url):
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            # Batch migrations copy and drop tables; with foreign keys on, the drop would cascade-check.
            # The pragma is a no-op inside a transaction, so set it on the raw connection first.
            conn.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
        try:
            conn.execution_options(**{WRITE: True})
            with conn.begin():
                if not sqlite:
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
                from alembic import command

                cfg = alembic_config(conn)
                if down:
                    command.downgrade(cfg, revision)
                else:
                    command.upgrade(cfg, revision)
        finally:
            if sqlite:
                conn.connection.driver_connection.execute("PRAGMA foreign_keys=ON")  # type: ignore[union-attr]


def check_revision(conn: Connection, url: str) -> str | None:
    """The database's revision, refusing one this cachekeeper does not know (a newer release wrote it)."""
    rev = current(conn)
    if rev is not None and not known(rev):
        raise CatalogError(f"catalog {url} is at revision {rev}, unknown to this cachekeeper",
                           "upgrade cachekeeper; the catalog was migrated by a newer release", url=url)
    return rev


def require_head(rev: str | None, url: str) -> None:
    if rev != head():
        raise CatalogNotMigrated(f"catalog {url} is at revision {rev or 'none'}, expected {head()}", url=url)

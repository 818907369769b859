"""`ls` at any catalog size: rows streamed from the database in batches and written as they come, in
constant memory, never built into CatalogRow objects. Rows come by toolchain, then entry key.

`ls --json` writes JSON lines: one object per manifest with the fields of `CatalogRow`, in its order
(`created_at` as `YYYY-MM-DD HH:MM:SS.ffffff+00:00`, `spec` and `build` as JSON objects).

Each line is rendered on whichever side is cheaper, measured on a 100k-row catalog
(benchmarks/catalog_scale.py): SQLite renders it in SQL (`json_object`, `printf`: one string per row
costs less to fetch than the columns it is made of); on Postgres, `json_build_object` took ~0.9 s of
server time, more than fetching the columns (`created_at` already as text) and formatting them here.

Rows come straight from the driver's cursor (SQLAlchemy's result layer costs more per row than the
formatting), and the queries are plain SQL text. So `direct_lines` lists without importing SQLAlchemy at
all (a third of `ls`'s CPU at 100k rows): in the plain case, a catalog that exists at the head revision,
the driver alone answers; in any other case it steps aside and the CLI opens the `Catalog`, which
migrates, or says what is wrong, as every other command does. This module imports no SQLAlchemy.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import fields
from json.encoder import encode_basestring as _quote  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any

from ..errors import CatalogError
from .rows import CatalogRow
from .settings import CONNECT_TIMEOUT_S, SQLITE_BUSY_TIMEOUT_S, VERSION_TABLE, check_url, default_url, heads

if TYPE_CHECKING:
    from sqlalchemy import Connection, Select

BATCH = 5000
FIELDS = tuple(f.name for f in fields(CatalogRow))
TEXT_COLUMNS = ("fingerprint_id", "name", "backend", "model", "component", "mode", "height", "width", "batch",
                "dtype", "total_size", "file_count")
# SQLite's printf of the line `text_line` writes (entries always carry model, shape and dtype).
_SQLITE_TEXT = ("printf('%s  %.12s  %-8s %s/%s %s %dx%dx%d %s  %8.1f MB  %d files', "
                + ", ".join(TEXT_COLUMNS[:10]) + ", total_size / 1e6, file_count)")


def where_manifests(query: Select[Any], fingerprint_id: str | None, backend: str | None, model: str | None,
                    kind: str) -> Select[Any]:
    """The filters `Catalog.find` applies (the same as `ls`'s, in SQLAlchemy terms): one kind, optionally
    one toolchain, backend and model."""
    from .models import ManifestModel

    query = query.where(ManifestModel.kind == kind)
    if fingerprint_id is not None:
        query = query.where(ManifestModel.fingerprint_id == fingerprint_id)
    if backend is not None:
        query = query.where(ManifestModel.backend == backend)
    if model is not None:
        query = query.where(ManifestModel.model == model)
    return query


# --- the queries -------------------------------------------------------------------------------------


def _sqlite_json_value(name: str) -> str:
    if name == "created_at":   # stored as UTC text with microseconds
        return "CAST(created_at AS TEXT) || '+00:00'"
    if name == "spec":         # stored as JSON text: embed it as JSON, not as a string
        return "json(spec)"
    if name == "build":
        return "coalesce(json(build), json('{}'))"
    return name


def _postgres_column(name: str) -> str:
    if name == "created_at":   # as SQLite has it; parsing 100k timestamps here and printing them cost more
        return "to_char(timezone('UTC', created_at), 'YYYY-MM-DD HH24:MI:SS.US') || '+00:00'"
    if name == "spec":         # verbatim JSON text: embedded as it is, never parsed and re-encoded
        return "spec::text"
    if name == "build":
        return "coalesce(build::text, '{}')"
    return name


def listing_sql(dialect: str, *, as_json: bool, fingerprint_id: str | None, backend: str | None,
                model: str | None, kind: str) -> tuple[str, list[str]]:
    """(SQL, parameters) of the `ls` query; rows by toolchain, then entry key: the order of the
    (fingerprint_id, name) unique index, so the database can stream them without sorting 100k first."""
    if dialect == "sqlite":
        mark = "?"
        if as_json:
            columns = "json_object(" + ", ".join(f"'{n}', {_sqlite_json_value(n)}" for n in FIELDS) + ")"
        else:
            columns = _SQLITE_TEXT
    else:
        mark = "%s"
        columns = ", ".join(_postgres_column(n) for n in FIELDS) if as_json else ", ".join(TEXT_COLUMNS)
    where, params = [f"kind = {mark}"], [kind]
    for column, value in (("fingerprint_id", fingerprint_id), ("backend", backend), ("model", model)):
        if value is not None:
            where.append(f"{column} = {mark}")
            params.append(value)
    return (f"SELECT {columns} FROM manifests WHERE {' AND '.join(where)} ORDER BY fingerprint_id, name",
            params)


# --- Postgres rows as lines --------------------------------------------------------------------------


def text_line(r: tuple[Any, ...]) -> str:
    fp, name, backend, model, component, mode, height, width, batch, dtype, size, files = r
    return (f"{fp}  {name[:12]}  {backend:<8} {model}/{component} {mode} "
            f"{height}x{width}x{batch} {dtype}  {size / 1e6:8.1f} MB  {files} files")


def json_line(r: tuple[Any, ...]) -> str:
    """One Postgres row of the JSON query as its line (keys in `FIELDS` order; the tests hold it to that).
    Null checks are inline: a helper call per field costs a third of the formatting at 100k rows."""
    (digest, key, kind, name, fp, entry_key, backend, model, component, mode, height, width, batch, dtype,
     revision, total_size, file_count, blob_count, created_at, store_url, spec, build) = r
    q = _quote
    return (f'{{"digest":{q(digest)},"key":{q(key)},"kind":{q(kind)},"name":{q(name)},"fingerprint_id":{q(fp)},'
            f'"entry_key":{"null" if entry_key is None else q(entry_key)},"backend":{q(backend)},'
            f'"model":{"null" if model is None else q(model)},'
            f'"component":{"null" if component is None else q(component)},'
            f'"mode":{"null" if mode is None else q(mode)},"height":{"null" if height is None else height},'
            f'"width":{"null" if width is None else width},"batch":{"null" if batch is None else batch},'
            f'"dtype":{"null" if dtype is None else q(dtype)},"revision":{"null" if revision is None else q(revision)},'
            f'"total_size":{total_size},"file_count":{file_count},"blob_count":{blob_count},'
            f'"created_at":"{created_at}","store_url":{q(store_url)},"spec":{spec or "null"},"build":{build}}}')


# --- streaming from a driver connection --------------------------------------------------------------


def lines(conn: Connection, url: str, *, fingerprint_id: str | None, backend: str | None, model: str | None,
          kind: str, as_json: bool) -> Iterator[list[str]]:
    """The `ls` lines of the matching manifests through an open SQLAlchemy connection (`Catalog.listing`)."""
    raw: Any = conn.connection.driver_connection
    yield from _driver_lines(raw, conn.dialect.name, url, fingerprint_id=fingerprint_id, backend=backend,
                             model=model, kind=kind, as_json=as_json)


def _driver_lines(raw: Any, dialect: str, url: str, *, fingerprint_id: str | None, backend: str | None,
                  model: str | None, kind: str, as_json: bool) -> Iterator[list[str]]:
    """Batches of up to BATCH lines, as the database hands the rows over."""
    sql, params = listing_sql(dialect, as_json=as_json, fingerprint_id=fingerprint_id, backend=backend,
                              model=model, kind=kind)
    try:
        if dialect == "sqlite":
            cursor = raw.execute(sql, params)
            while batch := cursor.fetchmany(BATCH):
                yield [r[0] for r in batch]
            return
        # psycopg: rows as the server produces them (chunked mode), no server-side cursor and no round
        # trip per batch; the client holds one batch at a time.
        rows = raw.cursor().stream(sql, params, size=BATCH)
        render = json_line if as_json else text_line
        while batch := list(itertools.islice(rows, BATCH)):
            yield list(map(render, batch))
    except Exception as exc:
        if not _is_driver_error(exc):
            raise
        # The driver's own errors bypass SQLAlchemy's translation (db.errors): one line, as those are.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CatalogError(f"catalog {url}: {first}", url=url) from exc


def _is_driver_error(exc: Exception) -> bool:
    # Both drivers follow DB-API: every error they raise derives from their module's `Error`.
    return type(exc).__module__.split(".")[0] in ("sqlite3", "psycopg")


# --- without SQLAlchemy ------------------------------------------------------------------------------


def direct_lines(url: str | None, *, fingerprint_id: str | None, backend: str | None, model: str | None,
                 kind: str, as_json: bool) -> Iterator[list[str]] | None:
    """`ls` lines read with the database driver alone, or None when this is not the plain case (no such
    SQLite file yet, a schema at another revision, a URL or driver SQLAlchemy would treat its own way, a
    database that does not answer): the caller then opens the `Catalog`, which migrates or explains."""
    url = check_url(url or default_url())
    raw, dialect = _connect(url)
    if raw is None:
        return None
    try:
        if _revision(raw) != head_revision():
            raw.close()
            return None
    except Exception as exc:
        raw.close()
        if _is_driver_error(exc):    # e.g. no version table: not a catalog this fast path knows
            return None
        raise
    return _closing(raw, _driver_lines(raw, dialect, _mask(url), fingerprint_id=fingerprint_id, backend=backend,
                                       model=model, kind=kind, as_json=as_json))


def _closing(raw: Any, batches: Iterator[list[str]]) -> Iterator[list[str]]:
    try:
        yield from batches
    finally:
        raw.close()


def _connect(url: str) -> tuple[Any, str]:
    """A driver connection for the URLs SQLAlchemy would hand to the same driver unchanged, else None."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None, ""
    if scheme == "sqlite":
        path = rest[1:] if rest.startswith("/") else ""
        if not path or "?" in path or path == ":memory:" or not os.path.isfile(path):
            return None, ""
        import sqlite3

        return sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None), "sqlite"
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        import psycopg

        args: dict[str, Any] = {k: v for k, v in (("connect_timeout", CONNECT_TIMEOUT_S),
                                                  ("application_name", "cachekeeper")) if f"{k}=" not in rest}
        try:
            return psycopg.connect(f"postgresql://{rest}", **args), "postgresql"
        except psycopg.Error:
            return None, ""    # the Catalog says why, in its own words
    return None, ""


def _revision(raw: Any) -> str | None:
    row = raw.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
    return row[0] if row else None


def _mask(url: str) -> str:
    """The URL with its password hidden, as db.mask writes it."""
    return re.sub(r"^([^:/]+://[^:/@]+):[^@]*@", r"\1:***@", url)


def head_revision() -> str | None:
    """= db.head(); None when the scripts cannot be read or have no single head: the fast path then
    steps aside and the Catalog says what is wrong."""
    try:
        found = heads()
    except CatalogError:
        return None
    return next(iter(found)) if len(found) == 1 else None


def written(batches: Iterator[list[str]], out: Any) -> int:
    n = 0
    for batch in batches:
        out.write("\n".join(batch) + "\n")
        n += len(batch)
    return n

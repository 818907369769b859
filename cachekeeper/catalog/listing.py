"""`ls` at any catalog size: rows streamed from the database in batches and written as they come, in
constant memory, never built into CatalogRow objects. Rows come by toolchain, then entry key.

`ls --json` writes JSON lines: one object per manifest with the fields of `CatalogRow`, in its order
(`created_at` as `YYYY-MM-DD HH:MM:SS[.ffffff]+00:00`, `spec` and `build` as JSON objects).

Each line is rendered on whichever side is cheaper, measured on a 100k-row catalog
(benchmarks/catalog_scale.py): SQLite renders it in SQL (`json_object`, `printf`: one string per row
costs less to fetch than the columns it is made of); on Postgres, `json_build_object` and `to_char` took
longer on the server than fetching the bare columns and formatting them here, so Python formats them.
Rows come straight from the driver's cursor: SQLAlchemy's result layer costs more per row than the
formatting does.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Iterator
from dataclasses import fields
from json.encoder import encode_basestring as _quote  # type: ignore[attr-defined]
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, Text, cast, func, literal_column, select

from ..errors import CatalogError
from .models import ManifestModel
from .rows import CatalogRow

M = ManifestModel
BATCH = 5000
FIELDS = tuple(f.name for f in fields(CatalogRow))
TEXT_COLUMNS = ("fingerprint_id", "name", "backend", "model", "component", "mode", "height", "width", "batch",
                "dtype", "total_size", "file_count")
# SQLite's printf of the same line as `text_line` (entries always carry model, shape and dtype).
_SQLITE_TEXT = "%s  %.12s  %-8s %s/%s %s %dx%dx%d %s  %8.1f MB  %d files"


def where_manifests(query: Select[Any], fingerprint_id: str | None, backend: str | None, model: str | None,
                    kind: str) -> Select[Any]:
    """The filters `ls` and `Catalog.find` share: one kind, optionally one toolchain, backend and model."""
    query = query.where(M.kind == kind)
    if fingerprint_id is not None:
        query = query.where(M.fingerprint_id == fingerprint_id)
    if backend is not None:
        query = query.where(M.backend == backend)
    if model is not None:
        query = query.where(M.model == model)
    return query


def _filtered(query: Select[Any], fingerprint_id: str | None, backend: str | None, model: str | None,
              kind: str) -> Select[Any]:
    # By toolchain, then entry key: the order of the (fingerprint_id, name) unique index, so the database
    # can stream rows without sorting 100k of them first.
    return where_manifests(query, fingerprint_id, backend, model, kind).order_by(M.fingerprint_id, M.name)


# --- text lines --------------------------------------------------------------------------------------


def text_query(dialect: str, fingerprint_id: str | None, backend: str | None, model: str | None,
               kind: str) -> Select[Any]:
    columns = [getattr(M, c) for c in TEXT_COLUMNS]
    if dialect == "sqlite":
        size_mb = M.total_size / literal_column("1e6")
        line = func.printf(literal_column(f"'{_SQLITE_TEXT}'"), *columns[:10], size_mb, M.file_count)
        return _filtered(select(line), fingerprint_id, backend, model, kind)
    return _filtered(select(*columns), fingerprint_id, backend, model, kind)


def text_line(r: tuple[Any, ...]) -> str:
    fp, name, backend, model, component, mode, height, width, batch, dtype, size, files = r
    return (f"{fp}  {name[:12]}  {backend:<8} {model}/{component} {mode} "
            f"{height}x{width}x{batch} {dtype}  {size / 1e6:8.1f} MB  {files} files")


# --- JSON lines --------------------------------------------------------------------------------------


def json_query(dialect: str, fingerprint_id: str | None, backend: str | None, model: str | None,
               kind: str) -> Select[Any]:
    """SQLite: one rendered line per row. Postgres: the columns `json_line` formats, JSON ones as text."""
    if dialect == "sqlite":
        pairs: list[ColumnElement[Any]] = []
        for name in FIELDS:
            pairs += [literal_column(f"'{name}'"), _sqlite_json_value(name)]
        return _filtered(select(func.json_object(*pairs)), fingerprint_id, backend, model, kind)
    columns: list[ColumnElement[Any]] = []
    for name in FIELDS:
        column = getattr(M, name)
        if name == "spec":      # verbatim JSON text: embedded as it is, never parsed and re-encoded
            column = cast(column, Text)
        elif name == "build":
            column = func.coalesce(cast(column, Text), "{}")
        columns.append(column)
    return _filtered(select(*columns), fingerprint_id, backend, model, kind)


def _sqlite_json_value(name: str) -> ColumnElement[Any]:
    column = getattr(M, name)
    if name == "created_at":   # stored as UTC text with microseconds
        return cast(column, Text).concat("+00:00")
    if name in ("spec", "build"):
        value = func.json(column)   # stored as JSON text: embed it as JSON, not as a string
        return func.coalesce(value, func.json("{}")) if name == "build" else value
    return typing.cast(ColumnElement[Any], column)


def json_line(r: tuple[Any, ...]) -> str:
    """One Postgres row of `json_query` as its JSON line (keys in `FIELDS` order; the tests hold it to that).
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


# --- streaming ---------------------------------------------------------------------------------------


def lines(conn: Connection, url: str, *, fingerprint_id: str | None, backend: str | None, model: str | None,
          kind: str, as_json: bool) -> Iterator[list[str]]:
    """The `ls` lines of the matching manifests, in batches of up to BATCH, as the database hands them over."""
    dialect = conn.dialect.name
    query = (json_query if as_json else text_query)(dialect, fingerprint_id, backend, model, kind)
    batches = _driver_batches(conn, url, query)
    if dialect == "sqlite":
        yield from ([r[0] for r in batch] for batch in batches)
    else:
        render = json_line if as_json else text_line
        yield from (list(map(render, batch)) for batch in batches)


def _driver_batches(conn: Connection, url: str, query: Select[Any]) -> Iterator[list[tuple[Any, ...]]]:
    compiled = query.compile(dialect=conn.dialect)
    raw: Any = conn.connection.driver_connection
    dbapi_error = conn.dialect.loaded_dbapi.Error
    try:
        if conn.dialect.name == "sqlite":
            cursor = raw.execute(str(compiled), tuple(compiled.params[k] for k in compiled.positiontup or ()))
            while batch := cursor.fetchmany(BATCH):
                yield batch
            return
        # Timestamps in UTC, so `json_line` prints them as they are (this transaction only).
        raw.execute("SET LOCAL TimeZone = 'UTC'")
        # psycopg: rows as the server produces them (chunked mode), no server-side cursor and no round
        # trip per batch; the client holds one batch at a time.
        rows = raw.cursor().stream(str(compiled), compiled.params, size=BATCH)
        while batch := list(itertools.islice(rows, BATCH)):
            yield batch
    except dbapi_error as exc:   # the driver's own errors bypass SQLAlchemy's translation (db.errors)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CatalogError(f"catalog {url}: {first}", url=url) from exc


def written(batches: Iterator[list[str]], out: Any) -> int:
    n = 0
    for batch in batches:
        out.write("\n".join(batch) + "\n")
        n += len(batch)
    return n

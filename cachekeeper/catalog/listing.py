"""`ls` at any catalog size: rows streamed from the database in batches and written as they come, in
constant memory, never built into CatalogRow objects. Rows come by toolchain, then entry key.

`ls --json` writes JSON lines: one object per manifest with the fields of `CatalogRow`, in its order
(`created_at` as `YYYY-MM-DD HH:MM:SS.ffffff+00:00`, `spec` and `build` as JSON objects). The database
renders each line (SQLite `json_object`, Postgres `json_build_object`), so Python only writes them.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

from sqlalchemy import ColumnElement, Row, Select, Text, cast, func, literal_column, select

from .models import ManifestModel
from .rows import CatalogRow

M = ManifestModel
BATCH = 5000
FIELDS = tuple(f.name for f in fields(CatalogRow))
TEXT_COLUMNS = ("fingerprint_id", "name", "backend", "model", "component", "mode", "height", "width", "batch",
                "dtype", "total_size", "file_count")


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
    # streams rows without sorting 100k of them first.
    return where_manifests(query, fingerprint_id, backend, model, kind).order_by(M.fingerprint_id, M.name)


def text_query(fingerprint_id: str | None, backend: str | None, model: str | None, kind: str) -> Select[Any]:
    return _filtered(select(*(getattr(M, c) for c in TEXT_COLUMNS)), fingerprint_id, backend, model, kind)


def text_line(r: Row[Any]) -> str:
    fp, name, backend, model, component, mode, height, width, batch, dtype, size, files = tuple(r)
    return (f"{fp}  {name[:12]}  {backend:<8} {model}/{component} {mode} "
            f"{height}x{width}x{batch} {dtype}  {size / 1e6:8.1f} MB  {files} files")


def _json_value(name: str, dialect: str) -> ColumnElement[Any]:
    column = getattr(M, name)
    if name == "created_at":   # stored as UTC; rendered as Python's str() of the aware datetime
        if dialect == "sqlite":
            return cast(column, Text).concat("+00:00")
        return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD HH24:MI:SS.US").concat("+00:00")
    if name in ("spec", "build") and dialect == "sqlite":
        value = func.json(column)   # stored as JSON text: embed it as JSON, not as a string
        return func.coalesce(value, func.json("{}")) if name == "build" else value
    if name == "build":
        return func.coalesce(column, cast(literal_column("'{}'"), column.type))
    return typing.cast(ColumnElement[Any], column)


def json_query(dialect: str, fingerprint_id: str | None, backend: str | None, model: str | None,
               kind: str) -> Select[Any]:
    pairs: list[ColumnElement[Any]] = []
    for name in FIELDS:
        pairs += [literal_column(f"'{name}'"), _json_value(name, dialect)]
    line = func.json_object(*pairs) if dialect == "sqlite" else cast(func.json_build_object(*pairs), Text)
    return _filtered(select(line.label("line")), fingerprint_id, backend, model, kind)


def written(lines: Iterator[list[str]], out: Any) -> int:
    n = 0
    for batch in lines:
        out.write("\n".join(batch) + "\n")
        n += len(batch)
    return n

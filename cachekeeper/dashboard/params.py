"""Query strings of the dashboard, parsed strictly and purely: anything that does not parse is a
`BadQuery` (a 400 page), never an exception deeper down (a 500)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

from ..catalog.views import STATUSES

MAX_FIELDS = 20
MAX_PAGE = 1_000_000
MAX_PER_PAGE = 500
_FP_PREFIX = re.compile(r"[0-9a-f]{1,16}")
_TEXT = re.compile(r"[^\x00-\x1f\x7f]{1,255}")


class BadQuery(ValueError):
    """The message is shown on the 400 page."""


@dataclass(frozen=True)
class MatrixParams:
    fp: str | None = None
    model: str | None = None
    mode: str | None = None
    dtype: str | None = None
    status: str | None = None
    page: int = 1
    per: int = 5           # models per page


@dataclass(frozen=True)
class DiffParams:
    a: str
    b: str
    workers: int = 1


def _pairs(query: str, allowed: frozenset[str]) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query), errors="strict",
                          max_num_fields=MAX_FIELDS)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadQuery(f"unparsable query string: {exc}") from None
    out: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            raise BadQuery(f"unknown parameter {name!r} (expected: {', '.join(sorted(allowed))})")
        if name in out:
            raise BadQuery(f"parameter {name!r} given twice")
        out[name] = value.strip()
    return {k: v for k, v in out.items() if v}   # an empty form field means "any"


def _int(d: dict[str, str], name: str, default: int, high: int) -> int:
    raw = d.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= high:
        raise BadQuery(f"{name} must be a whole number from 1 to {high}, got {raw!r}")
    return int(raw)


def _text(d: dict[str, str], name: str) -> str | None:
    raw = d.get(name)
    if raw is not None and not _TEXT.fullmatch(raw):
        raise BadQuery(f"{name} must be 1-255 printable characters")
    return raw


def _fp(d: dict[str, str], name: str) -> str | None:
    raw = d.get(name)
    if raw is not None and not _FP_PREFIX.fullmatch(raw.lower()):
        raise BadQuery(f"{name} must be a fingerprint id (up to 16 hex digits), got {raw[:40]!r}")
    return raw.lower() if raw else None


def parse_matrix(query: str) -> MatrixParams:
    d = _pairs(query, frozenset({"fp", "model", "mode", "dtype", "status", "page", "per"}))
    status = d.get("status")
    if status is not None and status not in STATUSES:
        raise BadQuery(f"status must be one of {', '.join(STATUSES)}, got {status[:40]!r}")
    return MatrixParams(fp=_fp(d, "fp"), model=_text(d, "model"), mode=_text(d, "mode"), dtype=_text(d, "dtype"),
                        status=status, page=_int(d, "page", 1, MAX_PAGE),
                        per=_int(d, "per", MatrixParams.per, MAX_PER_PAGE))


def parse_diff(query: str) -> DiffParams:
    d = _pairs(query, frozenset({"a", "b", "workers"}))
    a, b = _fp(d, "a"), _fp(d, "b")
    if a is None or b is None:
        raise BadQuery("a diff needs two fingerprint ids: ?a=ID&b=ID")
    return DiffParams(a, b, _int(d, "workers", 1, 100_000))

"""What `db.py` and the SQLAlchemy-free `ls` path (`listing.py`) share: the default URL and its check,
the version table, the connection timeouts, and the migration scripts' revisions. Imports no SQLAlchemy or
Alembic.
"""

from __future__ import annotations

import ast
import difflib
import functools
import re
from importlib import resources
from pathlib import Path

from ..errors import CatalogError, CatalogURLError

# Our own version table, so a catalog can share a database with an application that uses Alembic too.
VERSION_TABLE = "cachekeeper_alembic_version"
CONNECT_TIMEOUT_S = 5
SQLITE_BUSY_TIMEOUT_S = 30


def default_url() -> str:
    from ..settings import CATALOG
    from ..stores import default_home

    return CATALOG.get() or f"sqlite:///{default_home() / 'catalog.db'}"


# The URLs a catalog may have, as `scheme[+driver]`: SQLite, and Postgres through psycopg 3 (db.py takes a
# bare `postgresql://` or `postgres://` to mean it).
DIALECTS = {"sqlite": ("", "pysqlite"), "postgresql": ("", "psycopg"), "postgres": ("",)}
_CANONICAL = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}
EXAMPLES = "use sqlite:///path/catalog.db or postgresql+psycopg://user@host/db"
_PASSWORD = re.compile(r"^([^:/]*:/*[^:/@]+):[^@]*@")


def mask(url: str) -> str:
    """The URL with its password hidden (`user:***@`), as every message shows a catalog URL."""
    return _PASSWORD.sub(r"\1:***@", url)


def check_url(url: str, base: str | Path | None = None) -> str:
    """A catalog URL checked before any driver sees it, with a relative SQLite path resolved against `base`
    (default the cwd), so every message names the file that is meant. A misspelt scheme or driver, a
    missing `://`, or a SQLite URL with two slashes is a CatalogURLError (exit 2) with a did-you-mean."""
    name, sep, rest = url.partition("://")
    if not sep:
        raise _not_a_url(url)
    dialect, plus, driver = name.partition("+")
    if dialect not in DIALECTS or driver not in DIALECTS[dialect]:
        raise _unsupported(url, dialect, plus + driver, rest)
    if dialect != "sqlite" or not rest:
        return url     # a server's URL is the driver's to judge; `sqlite://` is an in-memory database
    if not rest.startswith("/"):
        raise _wrong(url, f"sqlite:///{rest}", "a SQLite URL has three slashes before a relative path")
    path, query_sep, query = rest[1:].partition("?")
    if path in ("", ":memory:") or path.startswith("file:"):
        return url
    return f"{name}:///{_local_path(path, base)}{query_sep}{query}"


def _local_path(path: str, base: str | Path | None) -> str:
    from ..stores.url import local_path

    return local_path(path, base)


def _not_a_url(url: str) -> CatalogURLError:
    word, colon, rest = url.partition(":")
    meant = difflib.get_close_matches(word.lower(), list(DIALECTS), n=1) if colon else []
    if meant:
        return _wrong(url, _suggest(_CANONICAL[meant[0]], rest.lstrip("/") if meant[0] != "sqlite" else rest),
                      f"{word}: is not followed by //")
    if not colon and url:
        return _wrong(url, _suggest("sqlite", url), "a catalog is named by a database URL")
    return CatalogURLError(f"catalog {mask(url)!r} is not a database URL", EXAMPLES, url=mask(url))


def _unsupported(url: str, dialect: str, driver: str, rest: str) -> CatalogURLError:
    known = difflib.get_close_matches(dialect.lower(), list(DIALECTS), n=1)
    message = (f"unsupported catalog database {dialect + driver!r} in {mask(url)!r} "
               "(supported: sqlite:///path, postgresql+psycopg://)")
    if not known:
        return CatalogURLError(message, EXAMPLES, url=mask(url))
    return CatalogURLError(message, f"did you mean {mask(_suggest(_CANONICAL[known[0]], rest))}?", url=mask(url))


def _suggest(dialect: str, rest: str) -> str:
    """`dialect://rest`, with SQLite's third slash (a relative path) added where it is missing."""
    if dialect == "sqlite" and not rest.startswith("/"):
        return f"sqlite:///{rest}"
    return f"{dialect}://{rest}"


def _wrong(url: str, meant: str, why: str) -> CatalogURLError:
    return CatalogURLError(f"catalog {mask(url)!r} is not a database URL: {why}", f"did you mean {mask(meant)}?",
                      url=mask(url))


def migrations_dir() -> Path:
    """The Alembic scripts: package `cachekeeper._migrations` when installed, ./migrations in a checkout."""
    try:
        path = Path(str(resources.files("cachekeeper._migrations")))
    except ModuleNotFoundError:
        path = Path(__file__).resolve().parents[2] / "migrations"
    if not (path / "env.py").is_file():
        raise CatalogError(f"catalog migrations not found at {path}", "reinstall cachekeeper", path=str(path))
    return path


_REVISION = re.compile(r"^(down_revision|revision)\b[^=]*=\s*(.+)$", re.M)


@functools.cache
def revisions() -> dict[str, tuple[str, ...]]:
    """revision -> its down revisions, read from the migration scripts' text (no Alembic import)."""
    out: dict[str, tuple[str, ...]] = {}
    for path in sorted((migrations_dir() / "versions").glob("*.py")):
        found = {k: ast.literal_eval(v.strip()) for k, v in _REVISION.findall(path.read_text())}
        if isinstance(found.get("revision"), str):
            down = found.get("down_revision")
            out[found["revision"]] = tuple(down) if isinstance(down, list | tuple) else ((down,) if down else ())
    return out


def heads() -> set[str]:
    revs = revisions()
    return set(revs) - {d for downs in revs.values() for d in downs}

"""What `db.py` and the SQLAlchemy-free `ls` path (`listing.py`) share: the default URL, the version
table, the connection timeouts, and the migration scripts' revisions. Imports no SQLAlchemy or Alembic.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from importlib import resources
from pathlib import Path

from ..errors import CatalogError

# Our own version table, so a catalog can share a database with an application that uses Alembic too.
VERSION_TABLE = "cachekeeper_alembic_version"
CONNECT_TIMEOUT_S = 5
SQLITE_BUSY_TIMEOUT_S = 30


def default_url() -> str:
    from ..stores import default_home

    return os.environ.get("CACHEKEEPER_CATALOG") or f"sqlite:///{default_home() / 'catalog.db'}"


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

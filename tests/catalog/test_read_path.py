"""Reading a catalog (ls, stats, coverage) does not load Alembic: the revision check reads the migration
scripts' own lines, and that reading agrees with Alembic's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cachekeeper.catalog import db


def test_the_revision_graph_read_from_the_scripts_is_alembics() -> None:
    script = db._script()
    assert db.head() == script.get_current_head()
    assert db.revisions() == {s.revision: tuple(s._all_down_revisions) for s in script.walk_revisions()}


def test_opening_a_migrated_catalog_to_read_it_imports_no_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    from cachekeeper.catalog import Catalog

    Catalog.open(url).close()   # migrates (Alembic is used here, in this process)
    code = (f"import sys; from cachekeeper.catalog import Catalog; c = Catalog.open({url!r}); c.fingerprints(); "
            "assert c.current() == __import__('cachekeeper.catalog.db').catalog.db.head(); "
            "assert 'alembic' not in sys.modules, sorted(m for m in sys.modules if 'alembic' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

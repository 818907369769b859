"""The dir2 plugin's conformance module, as its authors would keep it: cachekeeper's StoreConformance, with the
store opened from a `dir2://` URL (tests/plugins/test_plugin_boundary.py runs it where the plugin is installed).
The store implements only what docs/stores.md requires, so the suite skips the optional capabilities."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachekeeper.testing.stores import URLStoreConformance


class TestDir2Store(URLStoreConformance):
    url_fixture = "dir2_url"

    @pytest.fixture
    def dir2_url(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
        monkeypatch.setenv("CK_DIR2_ROOT", str(tmp_path / "volumes"))
        monkeypatch.delenv("CK_DIR2_FAULT", raising=False)
        yield f"dir2://team/{uuid.uuid4().hex}"

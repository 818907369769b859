"""The plugin's own conformance module, as its authors would keep it: cachekeeper's StoreConformance, with
the store opened the way a user reaches it, from a `dirstore://` URL (tests/plugins/test_store_plugin.py
runs it in a process where the plugin is installed)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachekeeper.testing.stores import URLStoreConformance


class TestDirStore(URLStoreConformance):
    url_fixture = "dirstore_url"

    @pytest.fixture
    def dirstore_url(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
        monkeypatch.setenv("CK_DIRSTORE_ROOT", str(tmp_path / "volumes"))
        yield f"dirstore://team/{uuid.uuid4().hex}"

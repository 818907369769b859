"""The in-memory store used by planning/publishing tests must keep the same contract as real stores."""

from __future__ import annotations

import pytest

from cachekeeper.stores import Store
from cachekeeper.stores.memory import MemoryStore
from cachekeeper.testing.stores import StoreConformance


class TestMemoryStore(StoreConformance):
    streams_downloads = False  # holds every object in memory anyway; download() is the base one-shot

    @pytest.fixture
    def store(self) -> Store:
        return MemoryStore()

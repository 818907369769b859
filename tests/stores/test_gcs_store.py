"""`gs://` store against fake-gcs-server: the conformance suite, plus prefixes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from cachekeeper.stores import Store, open_store

from .conformance import StoreConformance


@pytest.mark.services
class TestGCSStore(StoreConformance):
    @pytest.fixture
    def store(self, gcs_store_url: str) -> Iterator[Store]:
        store = open_store(gcs_store_url)
        yield store
        store.close()


@pytest.mark.services
def test_keys_live_under_the_url_prefix_and_list_relative_to_it(gcs_store_url: str) -> None:
    bucket = urlparse(gcs_store_url).netloc
    a, b, root = (open_store(f"gs://{bucket}/team-a"), open_store(f"gs://{bucket}/team-b"),
                  open_store(f"gs://{bucket}"))
    a.put_bytes("m/k", b"a")
    b.put_bytes("m/k", b"b")
    assert list(a.list()) == ["m/k"]
    assert a.get_bytes("m/k") == b"a"
    assert root.url == f"gs://{bucket}"
    assert sorted(root.list()) == ["team-a/m/k", "team-b/m/k"]


def test_opening_a_gs_url_is_lazy_and_file_stores_never_import_google_cloud_storage() -> None:
    code = ("import sys, tempfile; from cachekeeper.stores import open_store; "
            "open_store(tempfile.mkdtemp()).put_bytes('k', b'v'); "
            "assert 'google.cloud.storage' not in sys.modules, 'gcs imported'; "
            "open_store('gs://bucket/prefix'); assert 'google.cloud.storage' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

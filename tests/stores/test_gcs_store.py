"""`gs://` store against fake-gcs-server: the conformance suite, plus prefixes."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from cachekeeper.stores import open_store
from cachekeeper.testing.stores import URLStoreConformance

from .lazy import assert_opening_is_lazy


@pytest.mark.services
class TestGCSStore(URLStoreConformance):
    url_fixture = "gcs_store_url"


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
    assert_opening_is_lazy("gs://bucket/prefix", "google.cloud.storage", "gcs imported")

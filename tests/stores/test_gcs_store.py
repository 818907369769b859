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


@pytest.mark.services
@pytest.mark.parametrize("key", ["m/k", "blobs/ab/c d+e%f", "caf\u00e9/x#y?z"])
def test_the_ranged_reads_seam_matches_the_library_and_sends_through_its_session(gcs_store_url: str, key: str) -> None:
    """The two places the boot path leans on google-cloud-storage beyond its public reads: the media URL
    it builds from `Client.api_endpoint` + `Blob.path`, and the session handed to the client as `_http`
    (its documented constructor argument). A library release that changes either fails here."""
    from cachekeeper.stores.gcs import GCSStore

    store = open_store(gcs_store_url + "/seam")
    assert isinstance(store, GCSStore)
    store.put_bytes(key, b"0123456789")
    client = store._client()
    assert store.media_url(key) == store._blob(key)._get_download_url(client)
    got = store.prepared_get(key)
    assert client._http is store._session()
    resp = got.send(got.url, {"Range": "bytes=2-4"}, 3.0, 10.0)
    assert resp.status == 206 and resp.read1(100) == b"234"
    resp.release_conn()

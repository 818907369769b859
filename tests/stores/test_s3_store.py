"""`s3://` store against a real SeaweedFS: the conformance suite, plus prefixes and multipart uploads."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

from cachekeeper.stores import Store, open_store
from cachekeeper.stores.s3 import S3Store
from cachekeeper.testing.stores import LARGE, URLStoreConformance
from tests.harness.seaweedfs import S3Server

from .lazy import assert_opening_is_lazy


@pytest.mark.services
class TestS3Store(URLStoreConformance):
    url_fixture = "s3_store_url"

    def leave_debris(self, store: Store, tmp_path: Path) -> str | None:
        # A publisher killed inside a multipart upload: the upload stays open, its parts billed.
        assert isinstance(store, S3Store)
        key = "blobs/sha256/ab/large"
        upload = store._client().create_multipart_upload(Bucket=store.bucket, Key=store._key(key))
        store._client().upload_part(Bucket=store.bucket, Key=store._key(key), UploadId=upload["UploadId"],
                                    PartNumber=1, Body=b"part one")
        return key


def _bucket(url: str) -> str:
    return urlparse(url).netloc


@pytest.mark.services
def test_keys_live_under_the_url_prefix_and_list_relative_to_it(s3_store_url: str, s3_server: S3Server) -> None:
    bucket = _bucket(s3_store_url)
    a, b = open_store(f"s3://{bucket}/team-a"), open_store(f"s3://{bucket}/team-b")
    a.put_bytes("m/k", b"a")
    b.put_bytes("m/k", b"b")
    assert list(a.list()) == ["m/k"]
    assert a.get_bytes("m/k") == b"a"
    assert s3_server.client.get_object(Bucket=bucket, Key="team-a/m/k")["Body"].read() == b"a"


@pytest.mark.services
def test_a_store_without_prefix_uses_the_bucket_root(s3_store_url: str, s3_server: S3Server) -> None:
    bucket = _bucket(s3_store_url)
    store = open_store(f"s3://{bucket}")
    assert store.url == f"s3://{bucket}"
    store.put_bytes("m/k", b"v")
    assert s3_server.client.head_object(Bucket=bucket, Key="m/k")["ContentLength"] == 1


def _multipart_store(url: str) -> S3Store:
    """A store whose put_file goes multipart above 8 MiB (S3's minimum part is 5 MiB)."""
    store = open_store(url)
    assert isinstance(store, S3Store)
    store.multipart_threshold, store.part_size = 8 << 20, 5 << 20
    return store


@pytest.mark.services
def test_a_put_file_above_the_multipart_threshold_is_uploaded_in_parts(
        s3_store_url: str, s3_server: S3Server, tmp_path: Path) -> None:
    src = tmp_path / "big"
    src.write_bytes(random.Random(3).randbytes(LARGE))
    store = _multipart_store(s3_store_url)
    assert store.put_file("big", src) is True
    head = s3_server.client.head_object(Bucket=store.bucket, Key=f"{store.prefix}/big")
    assert head["ETag"].strip('"').endswith("-4")  # a multipart ETag names its part count: 20 MiB / 5 MiB
    assert store.get_bytes("big") == src.read_bytes()


@pytest.mark.services
def test_a_multipart_put_file_of_an_existing_key_returns_false_and_keeps_the_first_bytes(
        s3_store_url: str, tmp_path: Path) -> None:
    src = tmp_path / "big"
    src.write_bytes(b"\x01" * LARGE)
    store = _multipart_store(s3_store_url)
    store.put_bytes("big", b"first")
    assert store.put_file("big", src) is False
    assert store.get_bytes("big") == b"first"


@pytest.mark.services
def test_racing_multipart_put_files_store_one_writers_bytes_and_leave_no_pending_uploads(
        s3_store_url: str, s3_server: S3Server, tmp_path: Path) -> None:
    # Exactly one True is AWS's promise; SeaweedFS 4.48 may let both conditional completes succeed,
    # so this checks what holds on both: a winner, whole bytes from one writer, no orphaned parts.
    sources = [tmp_path / "src0", tmp_path / "src1"]
    for i, src in enumerate(sources):
        src.write_bytes(bytes([i]) * LARGE)
    store = _multipart_store(s3_store_url)
    results: list[bool] = []
    barrier = threading.Barrier(2)

    def writer(src: Path) -> None:
        barrier.wait()
        results.append(store.put_file("big", src))

    threads = [threading.Thread(target=writer, args=(src,)) for src in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert True in results
    assert store.get_bytes("big") in (sources[0].read_bytes(), sources[1].read_bytes())
    assert s3_server.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []) == []


def test_opening_an_s3_url_is_lazy_and_file_stores_never_import_botocore() -> None:
    assert_opening_is_lazy("s3://bucket/prefix", "botocore", "botocore imported")


@pytest.mark.parametrize("type_name", ["service-2", "paginators-1", "waiters-2", "endpoint-rule-set-1",
                                       "no-such-model-9"])
def test_the_store_s_loader_says_what_botocore_s_says_of_s3_without_walking_every_service(
        type_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.loaders

    from cachekeeper.stores.s3 import _S3Loader

    ours = _S3Loader()
    walked: list[str] = []
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p=".": walked.append(str(p)) or real(p))
    assert ("s3" in ours.list_available_services(type_name)) == \
        ("s3" in botocore.loaders.Loader().list_available_services(type_name))
    assert len(walked) > 100        # botocore's own answer walks every service's dir ...
    walked.clear()
    _S3Loader().list_available_services(type_name)
    assert len(walked) <= 4          # ... ours reads s3's own

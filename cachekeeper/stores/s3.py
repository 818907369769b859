"""`s3://bucket/prefix` store on boto3: AWS S3 and S3-compatible servers (SeaweedFS, MinIO, R2).

Credentials, profiles, region and `AWS_ENDPOINT_URL(_S3)` resolve as in boto3 (its botocore does it).
Immutability is `IfNoneMatch='*'`: on PutObject (atomic on AWS and SeaweedFS: racing writers get one
winner) and, for files above `multipart_threshold`, on CompleteMultipartUpload (atomic on AWS only).
The client is botocore's, what boto3 returns; it is imported here only, so `file://` users never load it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, Literal, NoReturn, cast

import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    DataNotFoundError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from .. import settings
from ..errors import StoreAuthError, StoreError, StoreUnreachable, StoreWriteDenied
from ..fs.paths import CHUNK
from ._util import ClientSlot
from .base import Debris, ObjectInfo, Store, check_key
from .ranged import RangedReads, Send
from .url import StoreURL

DEFAULT_REGION = "us-east-1"

# Credential problems botocore reports before any request is sent.
_CREDENTIAL_ERRORS: tuple[type[Exception], ...] = (
    NoCredentialsError, PartialCredentialsError, ProfileNotFound,
)
_AUTH_CODES = frozenset({
    "403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
    "InvalidToken", "TokenRefreshRequired", "AuthorizationHeaderMalformed",
})
_CHECKSUM_FIELDS = ("ChecksumCRC32", "ChecksumCRC32C", "ChecksumCRC64NVME", "ChecksumSHA1", "ChecksumSHA256")


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _is_not_found(exc: ClientError) -> bool:
    return _status(exc) == 404 or _code(exc) in ("404", "NoSuchKey", "NotFound", "NoSuchBucket")


@contextlib.contextmanager
def _write_denied(where: str, key: str, url: str, action: str = "s3:PutObject") -> Iterator[None]:
    """A write the policy refuses names the permission it lacks (deploy/policies/ grants it per prefix)."""
    try:
        yield
    except ClientError as exc:
        if _code(exc) != "AccessDenied":   # a bad key or signature is 403 too: that is StoreAuthError
            raise
        top = key.split("/", 1)[0]
        roles = ("builders write blobs/, manifests/ and signatures/, servers only reports/ (docs/security.md)"
                 if action == "s3:PutObject" else "only the operator role deletes (docs/security.md)")
        raise StoreWriteDenied(f"{where}: write refused: this identity lacks {action} on {top}/", roles,
                               key=key, url=url) from None


def _addressing_style() -> Literal["auto", "virtual", "path"]:
    """Path-style for emulators: their buckets are not DNS names under the endpoint's host."""
    forced = settings.S3_ADDRESSING_STYLE.get()   # checked: a typo is one error, never a silent "auto"
    if forced == "path":
        return "path"
    if forced == "virtual":
        return "virtual"
    if os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"):
        return "path"
    return "auto"


class _S3Loader(botocore.loaders.Loader):  # type: ignore[misc]
    """botocore's loader, for the one service a store loads. `load_service_model` asks
    `list_available_services` whether "s3" is a service, which walks every service's data dir (~900
    listdirs and ~2,700 stats: 40 ms of each process's first client, 8% of a no-op hydrate); this answers
    for s3 alone, from s3's own dir (an unknown type is still "not available", as botocore says)."""

    def list_available_services(self, type_name: str) -> list[str]:
        try:
            self.determine_latest_version("s3", type_name)
        except DataNotFoundError:
            return []
        return ["s3"]


_loader_lock = threading.Lock()
_loader: Any = None


def _new_client() -> Any:
    """A client from a fresh session (credentials, profile and region resolve now, per store) over one
    shared loader: parsing botocore's JSON models costs ~0.5 s per session, sharing them ~0.05 s.
    """
    global _loader
    with _loader_lock:  # the loader caches without locks of its own
        if _loader is None:
            _loader = _S3Loader()
        session = botocore.session.Session()
        session.register_component("data_loader", _loader)
        region = session.get_config_variable("region") or DEFAULT_REGION
        return session.create_client("s3", region_name=region, config=_client_config())


def _client_config() -> Config:
    # Fail fast on a dead endpoint (a few seconds, not botocore's minute); a read that gets no byte for
    # the stall timeout (CACHEKEEPER_STALL_TIMEOUT) is abandoned, and attempts are few, so a stalled store
    # ends a listing or a HEAD within a few stall timeouts (reader.sdk_timeouts), not 4 x 60 s; allow as
    # many pooled connections as the hydrate client runs fetch threads.
    from .reader import sdk_timeouts

    connect, read, attempts = sdk_timeouts()
    return Config(
        connect_timeout=connect,
        read_timeout=read,
        retries={"total_max_attempts": attempts, "mode": "standard"},   # max_attempts would add 1
        max_pool_connections=32,
        signature_version="s3v4",  # presigned reads (s3_read.py) too: botocore would presign with SigV2
        s3={"addressing_style": _addressing_style()},
    )


class S3Store(RangedReads, Store):
    service = "S3"
    _sdk_errors = (BotoCoreError, ClientError)
    # put_file sends one streamed PutObject up to this size: its IfNoneMatch is atomic everywhere we
    # tested. Above it, a parallel multipart upload with IfNoneMatch on CompleteMultipartUpload: atomic
    # on AWS, but SeaweedFS 4.48 lets two racing completes both succeed (last one's bytes stay).
    multipart_threshold = 256 << 20
    part_size = 16 << 20
    upload_threads = 4  # parts in flight, so at most upload_threads * part_size bytes in memory
    max_parts = 10_000  # S3's limit; part_size grows for files beyond part_size * max_parts

    @classmethod
    def open_url(cls, where: StoreURL, *, create: bool = True) -> S3Store:   # registered: stores/clouds.py
        return cls(where.bucket, where.path)

    def __init__(self, bucket: str, prefix: str) -> None:
        super().__init__("s3", bucket, prefix)
        self.bucket = bucket
        self._client_slot: ClientSlot[Any] = ClientSlot()

    # --- plumbing --------------------------------------------------------------------------------

    def _client(self) -> Any:
        # Sessions are not thread-safe but clients are: build one client once, under a lock.
        return self._client_slot.get(_new_client, self._errors)

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _raise(self, exc: BaseException, key: str | None = None) -> NoReturn:
        where = self._where(key)
        subject = {"key": key, "url": self.url}
        if isinstance(exc, _CREDENTIAL_ERRORS):
            raise StoreAuthError(f"{where}: no usable AWS credentials ({exc})", **subject) from None
        if isinstance(exc, BotoConnectionError | HTTPClientError | IncompleteReadError):  # refused, timeout, reset
            raise StoreUnreachable(f"{where}: cannot reach the S3 endpoint ({type(exc).__name__})", **subject) from None
        if isinstance(exc, ClientError):
            code, status = _code(exc), _status(exc)
            if code in _AUTH_CODES or status == 403:
                raise StoreAuthError(f"{where}: access denied ({code or status})", **subject) from None
            if code == "NoSuchBucket":
                raise self._not_found() from None
            raise StoreError(f"{where}: S3 error {code or status}", **subject) from None
        raise StoreError(f"{where}: {type(exc).__name__}: {exc}".splitlines()[0], **subject) from None

    def _bucket_exists(self) -> bool:
        """A bare 404 does not say whether the key or the bucket is missing; ask once and remember."""
        if self._bucket_seen:
            return True
        try:
            self._client().head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _is_not_found(exc):
                return False
            if not (_code(exc) in _AUTH_CODES or _status(exc) == 403):
                raise
            # No ListBucket permission: the object request already got past auth, so the bucket is there.
        self._bucket_seen = True
        return True

    def _head(self, key: str) -> int | None:
        k = self._key(key)
        with self._errors(key):
            try:
                resp = self._client().head_object(Bucket=self.bucket, Key=k)
            except ClientError as exc:
                if _is_not_found(exc):
                    return None
                raise
        return int(resp["ContentLength"])

    def _conditional(self, key: str, write: Callable[[], object]) -> bool:
        """Run a write carrying IfNoneMatch='*'; False if the key already exists.

        A 409 ConditionalRequestConflict means another conditional write to the key is in flight: wait
        for its object and report the loss, or try again if it failed. A retried request whose first
        attempt landed also reads as 412 (False); objects are content-addressed, so that is harmless.
        """
        for _ in range(4):
            with self._errors(key), _write_denied(self._where(key), key, self.url):
                try:
                    write()
                    return True
                except ClientError as exc:
                    if _status(exc) == 412 or _code(exc) == "PreconditionFailed":
                        return False
                    if _status(exc) != 409 and _code(exc) != "ConditionalRequestConflict":
                        raise
            for delay in (0.1, 0.2, 0.4, 0.8):
                if self._head(key) is not None:
                    return False
                time.sleep(delay)
        raise StoreError(f"{self._where(key)}: conditional writes kept conflicting", key=key, url=self.url)

    # --- Store API -------------------------------------------------------------------------------

    def put_bytes(self, key: str, data: bytes) -> bool:
        k = self._key(key)
        return self._conditional(key, lambda: self._client().put_object(
            Bucket=self.bucket, Key=k, Body=data, IfNoneMatch="*"))

    def put_file(self, key: str, path: Path) -> bool:
        k = self._key(key)
        size = path.stat().st_size
        if size <= self.multipart_threshold:
            def put() -> None:
                with open(path, "rb") as f:  # botocore streams (and rewinds on retry) a file body
                    self._client().put_object(Bucket=self.bucket, Key=k, Body=f, IfNoneMatch="*")
            return self._conditional(key, put)
        # Skip uploading gigabytes that would lose anyway; the conditional complete settles races on AWS.
        if self._head(key) is not None:
            return False
        return self._put_multipart(key, path, size)

    def _put_multipart(self, key: str, path: Path, size: int) -> bool:
        k = self._key(key)
        client = self._client()
        with self._errors(key), _write_denied(self._where(key), key, self.url):
            upload_id = str(client.create_multipart_upload(Bucket=self.bucket, Key=k)["UploadId"])
        won = False
        try:
            parts = self._upload_parts(key, upload_id, path, size)
            won = self._conditional(key, lambda: client.complete_multipart_upload(
                Bucket=self.bucket, Key=k, UploadId=upload_id, IfNoneMatch="*",
                MultipartUpload={"Parts": parts}))
            return won
        finally:
            if not won:  # a lost race or a failure: do not leave billed, invisible parts behind
                with contextlib.suppress(BotoCoreError, ClientError):
                    client.abort_multipart_upload(Bucket=self.bucket, Key=k, UploadId=upload_id)

    def _upload_parts(self, key: str, upload_id: str, path: Path, size: int) -> list[dict[str, Any]]:
        part_size = max(self.part_size, -(-size // self.max_parts))
        offsets = range(0, size, part_size)
        # Each worker reads its own slice, so at most `upload_threads` parts sit in memory.
        with ThreadPoolExecutor(self.upload_threads, thread_name_prefix="ck-s3-part") as pool:
            futures: list[Future[dict[str, Any]]] = [
                pool.submit(self._upload_part, key, upload_id, path, n, off, min(part_size, size - off))
                for n, off in enumerate(offsets, start=1)
            ]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise

    def _upload_part(self, key: str, upload_id: str, path: Path, number: int, offset: int,
                     length: int) -> dict[str, Any]:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        with self._errors(key), _write_denied(self._where(key), key, self.url):
            resp = self._client().upload_part(Bucket=self.bucket, Key=self._key(key), UploadId=upload_id,
                                              PartNumber=number, Body=data)
        # Pass the per-part checksums botocore computed on to the complete call, as AWS requires then.
        part: dict[str, Any] = {"PartNumber": number, "ETag": resp["ETag"]}
        part.update({name: resp[name] for name in _CHECKSUM_FIELDS if name in resp})
        return part

    def _get_object(self, key: str, k: str, **kwargs: Any) -> Any:
        """GetObject of `k` (the prefixed `key`), inside `self._errors(key)`; a missing key is ObjectNotFound."""
        try:
            return self._client().get_object(Bucket=self.bucket, Key=k, **kwargs)
        except ClientError as exc:
            if _is_not_found(exc) and _code(exc) != "NoSuchBucket":
                self._missing(key)
            raise

    def get_bytes(self, key: str) -> bytes:
        k = self._key(key)
        with self._errors(key):
            resp = self._get_object(key, k)
            return cast(bytes, resp["Body"].read())

    def get_range(self, key: str, start: int, length: int) -> bytes:
        k = self._key(key)
        if length <= 0:
            if self._head(key) is None:
                self._missing(key)
            return b""
        with self._errors(key):
            try:
                resp = self._get_object(key, k, Range=f"bytes={start}-{start + length - 1}")
            except ClientError as exc:
                if _status(exc) == 416 or _code(exc) == "InvalidRange":
                    return b""  # starts at or past the end (S3 also says this for any range of an empty object)
                raise
            return cast(bytes, resp["Body"].read())

    def download(self, key: str, out: BinaryIO) -> int:
        k = self._key(key)
        n = 0
        with self._errors(key):
            resp = self._get_object(key, k)
            for chunk in resp["Body"].iter_chunks(CHUNK):
                out.write(chunk)
                n += len(chunk)
        return n

    def _sign(self, key: str) -> tuple[str, Send]:
        """Presigned here (local: SigV4 with the client's credentials), sent over s3_read's pool."""
        from . import s3_read

        url = self._client().generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self._key(key)}, ExpiresIn=s3_read.PRESIGN_SECONDS)
        return url, s3_read.send

    def size(self, key: str) -> int | None:
        n = self._head(key)
        if n is None and not self._bucket_seen:
            with self._errors(key):
                if not self._bucket_exists():
                    raise self._not_found()
        return n

    def list(self, prefix: str = "") -> Iterator[str]:
        # ListObjectsV2 returns sizes and times whether asked or not: one listing serves both.
        return (info.key for info in self.list_info(prefix))

    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        base = f"{self.prefix}/" if self.prefix else ""
        paginator = self._client().get_paginator("list_objects_v2")
        with self._errors():
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix):
                for obj in page.get("Contents", ()):
                    yield ObjectInfo(str(obj["Key"])[len(base):], int(obj["Size"]), obj["LastModified"].timestamp())

    def delete(self, key: str) -> None:
        k = self._key(key)
        with self._errors(key), _write_denied(self._where(key), key, self.url, "s3:DeleteObject"):
            self._client().delete_object(Bucket=self.bucket, Key=k)  # S3 answers 204 for a missing key

    # PutObject is atomic (no temp object); a publisher killed inside a multipart upload leaves its
    # parts invisible to listings and billed until the upload is aborted.
    write_permission = ("grant s3:PutObject (and s3:GetObject, s3:ListBucket) on the bucket's blobs/, signatures/ "
                        "and manifests/<fingerprint>/captured/ keys to this host's role")
    debris_note = "s3: unfinished multipart uploads are aborted (a bucket lifecycle rule can do it too)"

    def list_debris(self) -> Iterator[Debris]:
        base = f"{self.prefix}/" if self.prefix else ""
        paginator = self._client().get_paginator("list_multipart_uploads")
        with self._errors():
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base):
                for up in page.get("Uploads", ()):
                    yield Debris(str(up["Key"])[len(base):], "multipart", up["Initiated"].timestamp(),
                                 upload_id=str(up["UploadId"]))

    def delete_debris(self, item: Debris) -> None:
        with self._errors(item.key):
            try:
                self._client().abort_multipart_upload(Bucket=self.bucket, Key=self._key(item.key),
                                                      UploadId=item.upload_id)
            except ClientError as exc:
                if _code(exc) != "NoSuchUpload" and not _is_not_found(exc):
                    raise

    def check(self) -> None:
        with self._errors():
            try:
                self._client().head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if _is_not_found(exc):
                    raise self._not_found() from None
                raise
        self._bucket_seen = True

    def close(self) -> None:
        self._client_slot.close()

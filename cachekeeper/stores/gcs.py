"""`gs://bucket/prefix` store on google-cloud-storage.

Credentials are Application Default Credentials; with `STORAGE_EMULATOR_HOST` set (fake-gcs-server)
the client is anonymous. Immutability is `if_generation_match=0`: the server refuses to create a
generation when one exists, so racing writers get exactly one winner (fake-gcs-server honours it on
single-request uploads only; see put_file).
"""

from __future__ import annotations

import http.client
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO, ClassVar, NoReturn, cast

import google.auth
import requests
import urllib3.exceptions
from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import storage
from google.cloud.storage import exceptions as storage_exceptions

from ..errors import StoreAuthError, StoreError, StoreUnreachable, StoreWriteDenied
from ._util import ClientSlot
from .base import ObjectInfo, Store, check_key
from .ranged import RangedReads, Response, Send, nothing_listens
from .url import StoreURL

# Up to this size put_file sends one request, which honours if_generation_match everywhere; above it
# a resumable upload streams `CHUNK_SIZE` bytes at a time (a multiple of 256 KiB, as GCS requires).
SIMPLE_UPLOAD_MAX = 8 << 20
CHUNK_SIZE = 16 << 20

_NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    requests.exceptions.ConnectionError, requests.exceptions.Timeout, requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.HTTPError, http.client.HTTPException, ConnectionError, auth_exceptions.TransportError,
)


# The library's own notion of transient (429/5xx, resets, timeouts; google.cloud.storage.retry), minus
# the hopeless cases; spelled out here because its predicate is private.
_TRANSIENT: tuple[type[BaseException], ...] = (
    api_exceptions.TooManyRequests, api_exceptions.InternalServerError, api_exceptions.BadGateway,
    api_exceptions.ServiceUnavailable, api_exceptions.GatewayTimeout, *_NETWORK_ERRORS,
)


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, _TRANSIENT) and not nothing_listens(exc)


def _timeout() -> tuple[float, float]:
    """(connect, read) seconds: a dead endpoint fails in seconds; a read that gets no byte for the stall
    timeout (CACHEKEEPER_STALL_TIMEOUT) is abandoned."""
    from .reader import sdk_timeouts

    connect, read, _ = sdk_timeouts()
    return connect, read


def _retry() -> Retry:
    """The library's default retries for two minutes. Here retries start only within (attempts - 1) stall
    timeouts of the first call, so a stalled store ends a call within `attempts` stall timeouts (plus
    connect timeouts), as S3's client and `read_into` do (reader.sdk_timeouts)."""
    from .reader import sdk_timeouts

    _, read, attempts = sdk_timeouts()
    return Retry(predicate=_retryable, initial=0.25, maximum=4.0, multiplier=2.0, timeout=(attempts - 1) * read)


class _CountingWriter:
    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.count = 0

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.count += len(data)
        return len(data)


class _Clients:
    """The SDK's client and the authorized session it sends through, which the boot path's ranged reads
    use too. The session is handed to the client as its documented `_http` argument (google-cloud-storage
    2.14-3.x, pinned in pyproject; tests/stores/test_gcs_store.py checks the seam)."""

    def __init__(self, client: storage.Client, session: AuthorizedSession) -> None:
        self.client, self.session = client, session

    @staticmethod
    def make() -> _Clients:
        project = os.environ.get("GOOGLE_CLOUD_PROJECT") or None
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            credentials: Credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
            project = project or "test"
        else:
            credentials, found = google.auth.default(scopes=storage.Client.SCOPE)  # type: ignore[no-untyped-call]
            project = project or found
        session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
        # requests pools 10 connections per host by default; hydrate fetches with up to 32 threads.
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=32)
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        return _Clients(storage.Client(project=project, credentials=credentials, _http=session), session)

    def close(self) -> None:
        self.client.close()
        self.session.close()  # type: ignore[no-untyped-call]


class GCSStore(RangedReads, Store):
    service = "GCS"
    # google/requests failures, translated by _raise
    _sdk_errors = (api_exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError, storage_exceptions.InvalidResponse,
                   storage_exceptions.DataCorruption, *_NETWORK_ERRORS)
    get_headers: ClassVar[Mapping[str, str]] = {"Accept-Encoding": "identity"}  # bytes as stored, as digested
    simple_upload_max = SIMPLE_UPLOAD_MAX
    chunk_size = CHUNK_SIZE

    @classmethod
    def open_url(cls, where: StoreURL, *, create: bool = True) -> GCSStore:   # registered: stores/clouds.py
        return cls(where.bucket, where.path)

    def __init__(self, bucket: str, prefix: str) -> None:
        super().__init__("gs", bucket, prefix)
        self._client_slot: ClientSlot[_Clients] = ClientSlot()

    # --- plumbing --------------------------------------------------------------------------------

    def _client(self) -> storage.Client:
        return self._client_slot.get(_Clients.make, self._errors).client

    def _session(self) -> AuthorizedSession:
        return self._client_slot.get(_Clients.make, self._errors).session

    def _bucket(self) -> storage.Bucket:
        return self._client().bucket(self.bucket_name)

    def _blob(self, key: str) -> storage.Blob:
        check_key(key)
        name = f"{self.prefix}/{key}" if self.prefix else key
        return self._bucket().blob(name)

    def _raise(self, exc: BaseException, key: str | None = None) -> NoReturn:
        where = self._where(key)
        subject = {"key": key, "url": self.url}
        if isinstance(exc, api_exceptions.RetryError) and exc.cause is not None:
            self._raise(exc.cause, key)
        if isinstance(exc, auth_exceptions.DefaultCredentialsError):
            raise StoreAuthError(f"{where}: no Google credentials found (Application Default Credentials)",
                                 **subject) from None
        if isinstance(exc, auth_exceptions.RefreshError | api_exceptions.Unauthorized | api_exceptions.Forbidden):
            raise StoreAuthError(f"{where}: access denied ({type(exc).__name__})", **subject) from None
        if isinstance(exc, _NETWORK_ERRORS):
            raise StoreUnreachable(f"{where}: cannot reach the GCS endpoint ({type(exc).__name__})",
                                   **subject) from None
        if isinstance(exc, api_exceptions.GoogleAPICallError):  # its `.message` is Google's text, shown as is
            raise StoreError(f"{where}: GCS error {exc.code} {exc.message}".splitlines()[0], **subject) from None
        raise StoreError(f"{where}: {type(exc).__name__}: {exc}".splitlines()[0], **subject) from None

    def _write_denied(self, key: str) -> StoreWriteDenied:
        """A write the policy refuses names the permission it lacks (deploy/policies/gcs grants it)."""
        top = key.split("/", 1)[0]
        return StoreWriteDenied(f"{self._where(key)}: write refused: this identity lacks storage.objects.create "
                                f"on {top}/", "builders write blobs/, manifests/ and signatures/, servers only "
                                "reports/ (docs/security.md)", key=key, url=self.url)

    def _bucket_exists(self) -> bool:
        """GCS answers a bare 404 for a missing object and a missing bucket alike; ask once and remember.

        By listing, not by reading bucket metadata: readers hold storage.objects.list but often not
        storage.buckets.get.
        """
        if self._bucket_seen:
            return True
        with self._errors():
            try:
                blobs = self._client().list_blobs(self.bucket_name, max_results=1, fields="items(name)",
                                                  timeout=_timeout(), retry=_retry())
                next(iter(blobs), None)
            except api_exceptions.NotFound:
                return False
            except api_exceptions.Forbidden:
                pass  # the object request already got past auth, so the bucket is there
        self._bucket_seen = True
        return True

    # --- Store API -------------------------------------------------------------------------------

    def put_bytes(self, key: str, data: bytes) -> bool:
        blob = self._blob(key)
        with self._errors(key):
            try:
                # A retried request whose first attempt landed also reads as 412 (False); objects are
                # content-addressed, so that is harmless.
                blob.upload_from_string(data, content_type="application/octet-stream", if_generation_match=0,
                                        timeout=_timeout(), retry=_retry())
            except api_exceptions.PreconditionFailed:
                return False
            except api_exceptions.NotFound:
                raise self._not_found() from None
            except api_exceptions.Forbidden:
                raise self._write_denied(key) from None
        return True

    def put_file(self, key: str, path: Path) -> bool:
        blob = self._blob(key)
        resumable = path.stat().st_size > self.simple_upload_max
        if resumable:
            # fake-gcs-server ignores ifGenerationMatch on resumable uploads, so check first. Real GCS
            # honours it at finalize; against the emulator two writers racing past this check both
            # "win" and the last one's bytes stay: harmless for content-addressed blobs only.
            if self.size(key) is not None:
                return False
            blob.chunk_size = self.chunk_size
        with self._errors(key):
            try:
                blob.upload_from_filename(str(path), content_type="application/octet-stream",
                                          if_generation_match=0, timeout=_timeout(), retry=_retry())
            except api_exceptions.PreconditionFailed:
                return False
            except api_exceptions.NotFound:
                raise self._not_found() from None
            except api_exceptions.Forbidden:
                raise self._write_denied(key) from None
        return True

    def get_bytes(self, key: str) -> bytes:
        blob = self._blob(key)
        with self._errors(key):
            try:
                return cast(bytes, blob.download_as_bytes(timeout=_timeout(), retry=_retry()))
            except api_exceptions.NotFound:
                self._missing(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            if self.size(key) is None:
                self._missing(key)
            return b""
        blob = self._blob(key)
        with self._errors(key):
            try:
                # `end` is inclusive.
                return cast(bytes, blob.download_as_bytes(start=start, end=start + length - 1,
                                                          timeout=_timeout(), retry=_retry()))
            except api_exceptions.RequestRangeNotSatisfiable:
                return b""  # starts at or past the end (also any range of an empty object)
            except api_exceptions.NotFound:
                self._missing(key)

    def download(self, key: str, out: BinaryIO) -> int:
        blob = self._blob(key)
        writer = _CountingWriter(out)
        with self._errors(key):
            try:
                blob.download_to_file(writer, timeout=_timeout(), retry=_retry())
            except api_exceptions.NotFound:
                self._missing(key)
        return writer.count

    def media_url(self, key: str) -> str:
        """The JSON API's media download URL of `key`, from public parts: the client's endpoint and the
        blob's path (what the library's own downloads request)."""
        return f"{self._client().api_endpoint}/download/storage/v1{self._blob(key).path}?alt=media"

    def _sign(self, key: str) -> tuple[str, Send]:
        """The media URL, sent through the store's authorized session."""
        url, session = self.media_url(key), self._session()

        def send(url: str, headers: dict[str, str], connect_timeout: float, read_timeout: float) -> Response:
            resp = session.get(url, headers=headers, stream=True, timeout=(connect_timeout, read_timeout))
            raw: Response = resp.raw  # a urllib3 response, body unread: RangeBody streams it
            return raw

        return url, send

    def size(self, key: str) -> int | None:
        blob = self._blob(key)
        with self._errors(key):
            try:
                blob.reload(projection="noAcl", timeout=_timeout(), retry=_retry())
            except api_exceptions.NotFound:
                if not self._bucket_exists():
                    raise self._not_found() from None
                return None
        return None if blob.size is None else int(blob.size)

    def _list_blobs(self, prefix: str, fields: str) -> Iterator[tuple[str, storage.Blob]]:
        """(key, blob) for each object under `prefix`, GCS sending only `fields` of each (less to parse)."""
        base = f"{self.prefix}/" if self.prefix else ""
        with self._errors():
            try:
                blobs = self._client().list_blobs(self.bucket_name, prefix=base + prefix,
                                                  fields=f"items({fields}),nextPageToken",
                                                  timeout=_timeout(), retry=_retry())
                for blob in blobs:
                    yield str(blob.name)[len(base):], blob
            except api_exceptions.NotFound:
                raise self._not_found() from None

    def list(self, prefix: str = "") -> Iterator[str]:
        return (key for key, _ in self._list_blobs(prefix, "name"))

    def list_info(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return (ObjectInfo(key, int(blob.size or 0), blob.updated.timestamp())
                for key, blob in self._list_blobs(prefix, "name,size,updated"))

    def delete(self, key: str) -> None:
        blob = self._blob(key)
        with self._errors(key):
            try:
                blob.delete(timeout=_timeout(), retry=_retry())
            except api_exceptions.NotFound:
                if not self._bucket_exists():
                    raise self._not_found() from None
            except api_exceptions.Forbidden:
                raise StoreWriteDenied(f"{self._where(key)}: write refused: this identity lacks "
                                       "storage.objects.delete", "only the operator role deletes "
                                       "(docs/security.md)", key=key, url=self.url) from None

    # Uploads create no object until they finish: a killed publisher leaves only a resumable-upload
    # session, which cannot be listed and which GCS expires by itself one week after it was started.
    write_permission = ("grant storage.objects.create (and storage.objects.get/list) on the bucket to this host's "
                        "account")
    debris_note = "gs: interrupted resumable uploads leave no object; GCS expires their sessions after 7 days"

    def check(self) -> None:
        # Listing needs only storage.objects.list, which every reader has; bucket metadata may be denied.
        next(self.list(), None)
        self._bucket_seen = True

    def close(self) -> None:
        self._client_slot.close()

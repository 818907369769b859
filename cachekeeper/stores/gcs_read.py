"""GCS reads for the boot path: one ranged media GET per attempt through the client's own authorized
session, with the timeouts the deadline leaves; `stores/reader.py` retries and resumes around it (the
library's own download retries restart from the first byte and run on their own clock)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import requests
import urllib3.exceptions

from ..errors import StoreAuthError, StoreError, StoreRetryable, StoreUnreachable
from .reader import Body, BytesBody, parse_content_range

if TYPE_CHECKING:
    from .gcs import GCSStore


class GCSBody(Body):
    def __init__(self, resp: requests.Response, where: str, skip: int) -> None:
        self.resp = resp
        self.where = where
        self.skip = skip
        if resp.status_code == 206:
            self.total = parse_content_range(resp.headers.get("Content-Range"))
        else:
            length = resp.headers.get("Content-Length", "")
            self.total = int(length) if length.isdigit() else None

    def chunks(self, size: int) -> Iterator[bytes]:
        try:
            # read1: what has arrived (a reset then loses no received byte); we asked for identity encoding
            while chunk := self.resp.raw.read1(size):
                if self.skip:
                    cut = min(self.skip, len(chunk))
                    self.skip -= cut
                    chunk = chunk[cut:]
                if chunk:
                    yield chunk
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise StoreRetryable(f"{self.where}: transfer broke mid-body ({type(exc).__name__})") from None

    def close(self) -> None:
        if self.resp.raw.length_remaining == 0:  # all of it read: keep the connection for the next request
            self.resp.raw.release_conn()
        else:
            self.resp.close()


def _refused(exc: BaseException) -> bool:
    from .gcs import _nothing_listens
    return _nothing_listens(exc)


def open_range(store: GCSStore, key: str, start: int, end: int | None, read_timeout: float,
               connect_timeout: float) -> Body:
    where = f"{store.url}/{key}"
    with store._errors(key):
        client = store._client()
        url = store._blob(key)._get_download_url(client)
        session: Any = client._http
    headers = {"Accept-Encoding": "identity"}  # bytes as stored: the digest is over them
    if start > 0 or end is not None:
        headers["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
    with store._errors(key):  # credential refreshes fail as google.auth errors: translated there
        try:
            resp = session.get(url, headers=headers, stream=True, timeout=(connect_timeout, read_timeout))
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            if _refused(exc):
                raise StoreUnreachable(f"{where}: cannot reach the GCS endpoint (connection refused)") from None
            raise StoreRetryable(f"{where}: request failed ({type(exc).__name__})") from None
    status = resp.status_code
    if status in (200, 206):
        return GCSBody(resp, where, start if status == 200 else 0)
    resp.close()
    if status == 416:
        return BytesBody(b"", parse_content_range(resp.headers.get("Content-Range")))
    if status == 404:
        store._missing(key)
    if status in (401, 403):
        raise StoreAuthError(f"{where}: access denied ({status})")
    if status == 429 or status >= 500:
        raise StoreRetryable(f"{where}: GCS answered {status}")
    raise StoreError(f"{where}: GCS answered {status}")

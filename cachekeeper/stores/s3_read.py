"""S3 reads for the boot path: one presigned, ranged GET per attempt over a shared urllib3 pool.

Why not botocore's get_object: its read timeout is fixed per client (a deadline needs one per request),
its retries restart an object from byte 0, and its response handling costs CPU we would rather spend
hashing. botocore still signs (presigning is local, SigV4 with the same credentials and endpoint);
`stores/reader.py` does the retrying and resuming around `open_range`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import urllib3
from urllib3.exceptions import HTTPError, NewConnectionError

from ..errors import StoreAuthError, StoreError, StoreRetryable, StoreUnreachable
from .reader import Body, parse_content_range

if TYPE_CHECKING:
    from .s3 import S3Store

PRESIGN_SECONDS = 3600
_pool_lock = threading.Lock()
_pool: urllib3.PoolManager | None = None


_proxies: dict[str, urllib3.ProxyManager] = {}


def _http(url: str) -> urllib3.PoolManager:
    """The shared pool, or a proxy's when HTTP(S)_PROXY applies to this endpoint (as botocore would)."""
    global _pool
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    with _pool_lock:
        from botocore.httpsession import get_cert_path

        ca = os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True)
        if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
            if proxy not in _proxies:
                _proxies[proxy] = urllib3.ProxyManager(proxy, num_pools=4, maxsize=64, block=False, ca_certs=ca)
            return _proxies[proxy]
        if _pool is None:
            _pool = urllib3.PoolManager(num_pools=4, maxsize=64, block=False, ca_certs=ca)
        return _pool


def _refused(exc: BaseException) -> bool:
    """Nothing listens: another attempt will not help within a boot budget."""
    return isinstance(exc, NewConnectionError) and isinstance(exc.__cause__ or exc.__context__, ConnectionRefusedError)


class S3Body(Body):
    def __init__(self, resp: Any, where: str, skip: int) -> None:
        self.resp = resp
        self.where = where
        self.skip = skip          # a server that ignored our Range header sends the object from byte 0
        self.total = _total(resp, skip)
        self.done = False

    def chunks(self, size: int) -> Iterator[bytes]:
        try:
            while True:
                chunk = self.resp.read1(size)  # what has arrived: a reset then loses no received byte
                if not chunk:
                    self.done = True
                    return
                if self.skip:
                    cut = min(self.skip, len(chunk))
                    self.skip -= cut
                    chunk = chunk[cut:]
                    if not chunk:
                        continue
                yield chunk
        except (HTTPError, OSError) as exc:
            raise StoreRetryable(f"{self.where}: transfer broke mid-body ({type(exc).__name__})") from None

    def close(self) -> None:
        if self.done or self.resp.length_remaining == 0:  # all of it read: the connection is reusable
            self.resp.release_conn()
        else:  # half-read: this connection cannot serve another request
            self.resp.close()
            self.resp.release_conn()


def _total(resp: Any, skip: int) -> int | None:
    if resp.status == 206:
        return parse_content_range(resp.headers.get("Content-Range"))
    length = resp.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def open_range(store: S3Store, key: str, start: int, end: int | None, read_timeout: float,
               connect_timeout: float) -> Body:
    where = f"{store.url}/{key}"
    with store._errors(key):  # credential problems surface while presigning
        url = store._client().generate_presigned_url(
            "get_object", Params={"Bucket": store.bucket, "Key": store._key(key)}, ExpiresIn=PRESIGN_SECONDS)
    headers = {}
    if start > 0 or end is not None:
        headers["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
    try:
        resp = _http(url).request("GET", url, headers=headers, preload_content=False, retries=False, redirect=False,
                               timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout))
    except (HTTPError, OSError) as exc:
        if _refused(exc):
            raise StoreUnreachable(f"{where}: cannot reach the S3 endpoint (connection refused)") from None
        raise StoreRetryable(f"{where}: request failed ({type(exc).__name__})") from None
    status = int(resp.status)
    if status in (200, 206):
        return S3Body(resp, where, start if status == 200 else 0)
    resp.drain_conn()
    resp.release_conn()
    if status == 416:  # starts at or past the end: an empty read, with the real size if the server says it
        from .reader import BytesBody
        return BytesBody(b"", parse_content_range(resp.headers.get("Content-Range")))
    if status == 404:
        store._missing(key)
    if status == 403:
        raise StoreAuthError(f"{where}: access denied (403)")
    if status == 429 or status >= 500:
        raise StoreRetryable(f"{where}: S3 answered {status}")
    raise StoreError(f"{where}: S3 answered {status}")

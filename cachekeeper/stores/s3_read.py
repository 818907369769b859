"""S3's half of the boot path's reads: a shared urllib3 pool that sends presigned GETs (`stores/ranged.py`
does the rest). botocore still signs: presigning is local, SigV4 with the same credentials and endpoint."""

from __future__ import annotations

import os
import threading

import urllib3

from .ranged import Response

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


def send(url: str, headers: dict[str, str], connect_timeout: float, read_timeout: float) -> Response:
    resp: Response = _http(url).request(
        "GET", url, headers=headers, preload_content=False, retries=False, redirect=False,
        timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout))
    return resp

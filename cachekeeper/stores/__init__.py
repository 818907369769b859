"""Open a store from its URL. Cloud SDKs are imported only when their scheme is used."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from ..errors import UsageError
from .base import Store

__all__ = ["Store", "default_home", "default_store_url", "open_store"]


def default_home() -> Path:
    return Path(os.environ.get("CACHEKEEPER_HOME") or ".cachekeeper").absolute()


def default_store_url() -> str:
    return os.environ.get("CACHEKEEPER_STORE") or f"file://{default_home() / 'store'}"


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """`file:///abs/path` or a plain path, `s3://bucket/prefix`, `gs://bucket/prefix`."""
    url = url or default_store_url()
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        from .file import FileStore
        path = parsed.path if parsed.scheme == "file" else url
        return FileStore(Path(path), create=create)
    if parsed.scheme == "s3":
        from .s3 import S3Store
        return S3Store(parsed.netloc, parsed.path.strip("/"))
    if parsed.scheme == "gs":
        from .gcs import GCSStore
        return GCSStore(parsed.netloc, parsed.path.strip("/"))
    raise UsageError(f"unsupported store URL {url!r}", "use file:///path, s3://bucket/prefix or gs://bucket/prefix")

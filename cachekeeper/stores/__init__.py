"""Open a store from its URL. Cloud SDKs are imported only when their scheme is used."""

from __future__ import annotations

import os
from pathlib import Path

from .base import Store
from .url import StoreURL, parse_store_url

__all__ = ["Store", "StoreURL", "default_home", "default_store_url", "open_store", "parse_store_url"]


def default_home() -> Path:
    return Path(os.environ.get("CACHEKEEPER_HOME") or ".cachekeeper").absolute()


def default_store_url() -> str:
    return os.environ.get("CACHEKEEPER_STORE") or f"file://{default_home() / 'store'}"


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """`file:///abs/path` or a plain path, `s3://bucket/prefix`, `gs://bucket/prefix` (see stores/url.py)."""
    where = parse_store_url(url or default_store_url())
    if where.scheme == "s3":
        from .s3 import S3Store
        return S3Store(where.bucket, where.path)
    if where.scheme == "gs":
        from .gcs import GCSStore
        return GCSStore(where.bucket, where.path)
    from .file import FileStore
    return FileStore(Path(where.path), create=create)

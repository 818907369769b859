"""Open a store from its URL, by the store registered for its scheme (stores/schemes.py). Cloud SDKs are
imported only when their scheme is opened."""

from __future__ import annotations

from pathlib import Path

from .. import settings
from .base import Store
from .schemes import installed_schemes, open_url, parse_store_url
from .url import StoreURL

__all__ = ["Store", "StoreURL", "default_home", "default_store_url", "installed_schemes", "open_store",
           "parse_store_url"]


def default_home() -> Path:
    return (settings.HOME.get() or Path(".cachekeeper")).absolute()


def default_store_url() -> str:
    return settings.STORE.get() or f"file://{default_home() / 'store'}"


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """The store `url` names (default: CACHEKEEPER_STORE, else the home's `store/`), by its scheme:
    `file:///abs/path` or a plain path, `s3://bucket/prefix`, `gs://bucket/prefix`, or a plugin's."""
    return open_url(url or default_store_url(), create=create)

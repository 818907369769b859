"""Open a store from its URL, by the store registered for its scheme (stores/schemes.py). Cloud SDKs are
imported only when their scheme is opened."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .. import settings
from .base import OnDemand, Store
from .schemes import installed_schemes, open_url, parse_store_url
from .url import StoreURL

__all__ = ["Store", "StoreURL", "default_home", "default_store_url", "installed_schemes", "on_demand", "open_store",
           "opener", "parse_store_url"]


def default_home() -> Path:
    return (settings.HOME.get() or Path(".cachekeeper")).absolute()


def default_store_url() -> str:
    return settings.STORE.get() or f"file://{default_home() / 'store'}"


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """The store `url` names (default: CACHEKEEPER_STORE, else the home's `store/`), by its scheme:
    `file:///abs/path` or a plain path, `s3://bucket/prefix`, `gs://bucket/prefix`, or a plugin's."""
    return open_url(url or default_store_url(), create=create)


def opener(url: str | None) -> Callable[[], Store]:
    """Opens the store `url` names (else the default) when called; never creates one (a reader's typo must
    not make an empty bucket dir). Called late, so a no-op hydrate opens nothing."""
    def open_it() -> Store:
        return open_store(url, create=False)

    return open_it


def on_demand(url: str | None) -> OnDemand:
    """An opener for code that opens its store late, often, or not at all (capture's rounds, hot first's
    phases): `with on_demand(url) as get`: opened on the first call, the same one handed out after, closed
    when the block ends."""
    return OnDemand(opener(url))

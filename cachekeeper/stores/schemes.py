"""Which store a URL names: its scheme, looked up in the entry-point group `cachekeeper.stores`.

Every store is registered there, cachekeeper's own (`file`, `s3`, `gs`: pyproject.toml) the same way as a
plugin's. The entry point's name is the scheme; its object parses that scheme's URLs (`parse_url`) and
opens a store from one (`open_url`): a `Store` subclass, or a `LazyStore` that imports its store's module
(and so its SDK) only to open one. A scheme registered twice, to different objects, is refused rather
than resolved by install order: a store other than the one meant is worse than none.

A plugin's store (any scheme whose object is not cachekeeper's own) is opened behind `PluginStore`
(stores/plugin.py): whatever its parse, open or any later call raises outside the store contract becomes a
store error naming the plugin, so a plugin's stray exception is a store failure, never a traceback.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import UsageError, outside_contract
from .base import Store
from .url import StoreURL, closest, near_url, split_url, suggest_url

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

GROUP = "cachekeeper.stores"


class StoreScheme(Protocol):
    """What a `cachekeeper.stores` entry point names (a Store subclass or a LazyStore)."""

    def parse_url(self, url: str, base: str | Path | None = None) -> StoreURL: ...

    def open_url(self, where: StoreURL, *, create: bool = True) -> Store: ...


@functools.cache
def _registered() -> dict[str, list[EntryPoint]]:
    """scheme -> its entry points (distinct targets), as the installed distributions declare them."""
    from importlib.metadata import entry_points

    found: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=GROUP):
        same = found.setdefault(ep.name.lower(), [])
        if all(other.value != ep.value for other in same):   # one package seen twice on the path is one
            same.append(ep)
    return found


def installed_schemes() -> list[str]:
    """The schemes a store URL may use here, sorted."""
    return sorted(_registered())


def _origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{ep.value} from {dist.name}" if dist is not None else ep.value


@functools.cache
def store_scheme(scheme: str) -> StoreScheme:
    """The object registered for `scheme` (lower case), loaded; UsageError if it is not installed, is
    registered twice, or cannot be loaded."""
    eps = _registered().get(scheme)
    if not eps:
        raise unknown_scheme(scheme, f"{scheme}://")
    if len(eps) > 1:
        raise UsageError(f"store scheme {scheme!r} is registered more than once: "
                         + "; ".join(_origin(ep) for ep in eps),
                         f"uninstall all but one of the packages that provide {scheme}://")
    try:
        loaded = eps[0].load()
    except Exception as exc:   # a plugin's import can fail any way; it must end as one line
        raise UsageError(f"store scheme {scheme!r} ({_origin(eps[0])}) cannot be loaded: {exc}",
                         "check that the package providing it is installed with its dependencies") from None
    if not (callable(getattr(loaded, "parse_url", None)) and callable(getattr(loaded, "open_url", None))):
        raise UsageError(f"store scheme {scheme!r} ({_origin(eps[0])}) names no store",
                         "a cachekeeper.stores entry point names a Store subclass or a LazyStore")
    scheme_object: StoreScheme = loaded
    return scheme_object


@functools.cache
def plugin_origin(scheme: str) -> str | None:
    """`dir2 (ck_dir2:Dir2Store from ck-dir2)` for a plugin's scheme, what its errors are named by; None for
    cachekeeper's own stores (their object lives in the cachekeeper package) and an unknown scheme."""
    eps = _registered().get(scheme)
    if not eps or eps[0].module.partition(".")[0] == "cachekeeper":
        return None
    return f"{scheme} ({_origin(eps[0])})"


def unknown_scheme(scheme: str, url: str) -> UsageError:
    """The one error for a scheme no installed distribution registers, listing those that are."""
    installed = installed_schemes()
    message = (f"unsupported store URL scheme {scheme!r} in {url!r} "
               f"(installed schemes: {', '.join(installed) or 'none'})")
    guess = closest(scheme, installed)
    if guess is not None:
        rest = split_url(url)[1]
        return UsageError(message, f"did you mean {suggest_url(guess, rest, _parses) or f'{guess}://{rest}'}?",
                          url=url)
    if not installed:
        return UsageError(message, "cachekeeper's package metadata registers no store: reinstall cachekeeper "
                                   "(in a checkout: pip install -e .)", url=url)
    return UsageError(message, f"install the package that registers {scheme}:// in the entry-point group {GROUP}, "
                               "or use an installed scheme", url=url)


def _parses(url: str) -> bool:
    try:
        parse_store_url(url)
    except UsageError:
        return False
    return True


def parse_store_url(url: str, base: str | Path | None = None) -> StoreURL:
    """Validate a store URL by its scheme's rule; a relative file path resolves against `base` (default the
    cwd). Raises UsageError (its `url` field set) for an unknown scheme, a mistyped one (`gs:/bucket`: with
    a did-you-mean), or a URL its store refuses (a bucket URL without a bucket, a file URL without a path)."""
    scheme, _ = split_url(url)
    if not scheme:
        meant = near_url(url, installed_schemes(), _parses) if ":" in url or "//" in url else None
        if meant is not None:
            raise UsageError(f"store {url!r} looks like a mistyped {split_url(meant)[0]}:// URL",
                             f"did you mean {meant}? (a local directory: write ./{url})", url=url)
        scheme = "file"   # a plain path
    if scheme not in _registered():
        raise unknown_scheme(scheme, url)
    origin = plugin_origin(scheme)
    try:
        where = store_scheme(scheme).parse_url(url, base)
    except Exception as exc:
        if origin is None or not outside_contract(exc):
            raise
        from .plugin import translate  # only for a plugin: cachekeeper's own stores never load it

        raise translate(exc, origin, f"parsing {url}", url=url) from exc
    if where.scheme != scheme:
        raise UsageError(f"store scheme {scheme!r} parsed {url!r} as {where.scheme!r}",
                         f"the {scheme}:// store's parse_url keeps its scheme", url=url)
    return where


def open_url(url: str, *, create: bool = True) -> Store:
    """The store `url` names, opened by its scheme's registered object (a plugin's behind `PluginStore`)."""
    where = parse_store_url(url)
    origin = plugin_origin(where.scheme)
    try:
        store = store_scheme(where.scheme).open_url(where, create=create)
    except ImportError as exc:   # a LazyStore's module, or its SDK, is not installed
        raise UsageError(f"the {where.scheme}:// store cannot be loaded: {exc}",
                         f"install the package that provides {where.scheme}:// with its dependencies "
                         "(cachekeeper's own: pip install 'cachekeeper[s3]' or 'cachekeeper[gcs]')",
                         url=str(where)) from None
    except Exception as exc:
        if origin is None or not outside_contract(exc):
            raise
        from .plugin import translate

        raise translate(exc, origin, f"opening {where}", url=str(where)) from exc
    if not isinstance(store, Store):
        raise UsageError(f"the {where.scheme}:// store opened {type(store).__name__}, not a Store",
                         "a store's open_url returns a cachekeeper.stores.base.Store", url=str(where))
    if origin is None:
        return store
    from .plugin import PluginStore

    return PluginStore(store, origin)

"""What a capture asks for, resolved once for both entries: `cachekeeper capture` and `cachekeeper.capture`.

    config path, dest, backend, options ─▶ resolve_capture ─▶ CaptureRequest ─▶ capture_rounds / run_capture

The resolution (publishing allowed, which dest and backend, this host's toolchain, the served dir, the
signing key) raises the same errors in the same order for both, and the store and catalog are opened the
same way (on demand, the named one else the config's), so the CLI and the API cannot drift apart.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..format.fingerprint import Fingerprint
from .capture import CaptureReport, Include, capture, never_hydrated

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..config import Config
    from ..format.signing import SigningKey


@dataclass(frozen=True)
class CaptureRequest:
    """One resolved capture: the served dir to scan, the toolchain it must belong to, and (with `publish`)
    where its captured set goes. `store_url`/`catalog_url` None: the config's, else the default."""

    dest: Path                      # the toolchain's own dir under the hydrated dest
    fingerprint: Fingerprint
    include: Include                # the backend's filter: what counts as a cache file
    config: Config | None
    publish: bool = False
    store_url: str | None = None
    catalog_url: str | None = None
    signing_key: SigningKey | None = None
    settle_s: float = 2.0
    lock_timeout: float = 10.0


def resolve_capture(dest: str | PathLike[str], *, config: str | PathLike[str] | None = None,
                    backend: str | None = None, device: str | None = None, options: Mapping[str, str] | None = None,
                    publish: bool = False, store_url: str | None = None, catalog_url: str | None = None,
                    sign_key: str | PathLike[str] | None = None, settle_s: float = 2.0,
                    lock_timeout: float = 10.0) -> CaptureRequest:
    """`dest` may be the hydrated dest or one of its toolchain dirs; the backend, unless named, is the one it
    was hydrated for. Publishing is refused before anything is read unless the config opts in."""
    from ..backends.host import host_toolchain, pick_backend
    from ..config import load_config
    from ..hydration.destdir import served_dir

    cfg = load_config(str(config)) if config is not None else None
    if publish:
        require_publish_allowed(cfg)
    top, backend = capture_target(Path(dest), backend, cfg)
    tc = host_toolchain(cfg, pick_backend(cfg, backend), options, device)
    key = None
    if publish and sign_key is not None:
        from ..format.signing import SigningKey

        key = SigningKey.load(Path(sign_key))
    return CaptureRequest(served_dir(top, tc.fingerprint.id), tc.fingerprint, tc.backend.include, cfg,
                          publish=publish, store_url=store_url, catalog_url=catalog_url, signing_key=key,
                          settle_s=settle_s, lock_timeout=lock_timeout)


@contextlib.contextmanager
def capture_rounds(req: CaptureRequest) -> Iterator[Callable[[], CaptureReport]]:
    """`with capture_rounds(req) as once:` each `once()` is one capture; every round (`capture --watch`)
    shares one store, opened on first use and closed when the block ends."""
    from ..stores import on_demand

    with on_demand(req.store_url or (req.config.store if req.config else None)) as store_fn:
        yield functools.partial(capture, req.dest, req.fingerprint, req.include,
                                open_store=store_fn if req.publish else None, settle_s=req.settle_s,
                                lock_timeout=req.lock_timeout, signing_key=req.signing_key,
                                catalog=_catalog_opener(req) if req.publish else None)


def run_capture(req: CaptureRequest) -> CaptureReport:
    """One capture (what the API and a plain `cachekeeper capture` run)."""
    with capture_rounds(req) as once:
        return once()


def _catalog_opener(req: CaptureRequest) -> Callable[[], Catalog]:
    """The named catalog, else the config's, else the default (as prebuild's), so `ls --captured`, `stats`
    and `coverage` see what the next hydrate pulls. Opened only when a set was published."""
    url = req.catalog_url or (req.config.catalog if req.config else None)

    def open_it() -> Catalog:
        from ..catalog import Catalog

        return Catalog.open(url)

    return open_it


def capture_target(dest: Path, backend: str | None, config: Config | None = None) -> tuple[Path, str | None]:
    """(the dest `dest` names, the backend it was hydrated for): `dest` may be the dest or one of its
    toolchain dirs (destdir.resolve_dest); the backend comes from `backend`, else layout.json, else a flat
    dest's state (None: the config's). A dest that is not there is one CaptureError."""
    from ..hydration.destdir import backend_of, resolve_dest

    top = resolve_dest(dest)
    if not top.is_dir():
        raise never_hydrated(top)
    return top, backend or backend_of(top, needed=not _names_one_backend(config))


def _names_one_backend(config: Config | None) -> bool:
    return config is not None and len(config.backend_names()) == 1


def require_publish_allowed(config: Config | None) -> None:
    """Publishing captured sets is opt-in: every host of the toolchain runs what a serving host writes
    back, so one compromised or buggy server could put code on the whole fleet."""
    if config is None or not config.capture_publish:
        where = f"{config.source} does not say" if config is not None else "no config given says"
        raise UsageError(f"publishing captured sets is off: {where} `capture: publish`",
                         "serving hosts report misses instead (report, then suggest, then the builder); a "
                         "single-tenant fleet that accepts the risk sets `capture: publish` in its config")


__all__ = ["CaptureRequest", "capture_rounds", "capture_target", "require_publish_allowed", "resolve_capture",
           "run_capture"]

"""What a hydrate asks for, settled before any download: the backend, this host's toolchain (fingerprint
and options), the wanted pins and the destination.

    config or lockfile ─▶ backend ─▶ host toolchain ─▶ pins (config entries, lockfile, or None: list) ─▶ dest

The CLI (`hydrate`, `env`, `capture`, `lock`, `coverage`, `explain`, `diff`) and the Python API (`api.py`)
resolve through these functions, so the two cannot drift apart. Light like the rest of the boot path:
backends and signing are imported only when used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BackendUnavailable, ConfigError, ToolchainMismatch, UsageError
from ..format.manifest import KIND_ENTRY
from .resolve import Pin, read_lockfile

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..config import Config, MatrixEntry
    from ..format.fingerprint import Fingerprint
    from ..format.signing import PublicKey
    from ..stores.base import Store
    from .fetch import FetchStats
    from .hydrate import HydrateReport


@dataclass(frozen=True)
class HostToolchain:
    """One backend as this host would run it: the fingerprint its artifacts must carry."""

    name: str
    backend: Backend
    fingerprint: Fingerprint
    options: dict[str, str]


@dataclass(frozen=True)
class HydrateRequest:
    config: Config | None
    toolchain: HostToolchain
    pins: list[Pin] | None       # None: every entry the store has for this toolchain
    dest: Path
    models: frozenset[str] | None = None    # only these models (listing mode; a config's pins are filtered)
    store_url: str | None = None            # None: the config's store, else the default


def load_config(path: str | PathLike[str] | None) -> Config | None:
    if path is None:
        return None
    from ..config import load_config as load

    return load(str(path))


def pick_backend(config: Config | None, backend: str | None) -> str:
    """The named backend, or the config's only one; several or none is a usage error."""
    if backend:
        return backend
    names = config.backend_names() if config else []
    if len(names) == 1:
        return names[0]
    raise UsageError("which backend? name one" + (f" (the config names {', '.join(names)})" if names else ""))


def backend_options(config: Config | None, backend: str, options: Mapping[str, str] | None = None,
                    device: str | None = None) -> dict[str, str]:
    """The config's options for `backend`, overridden by `options`, then by `device`."""
    merged = config.backend_options_for(backend) if config else {}
    merged.update(options or {})
    if device:
        merged["device"] = device
    return merged


def host_toolchain(config: Config | None, name: str, options: Mapping[str, str] | None = None,
                   device: str | None = None) -> HostToolchain:
    """This host's toolchain for backend `name`; a backend that cannot run here is an error, not a miss."""
    from ..backends import get_backend

    backend = get_backend(name)
    opts = backend_options(config, name, options, device)
    reason = backend.unavailable_reason(opts)
    if reason:
        raise BackendUnavailable.of(name, f"not usable on this host: {reason}")
    return HostToolchain(name, backend, backend.fingerprint(opts), opts)


def only_shapes(entries: list[MatrixEntry], shapes: Sequence[str], source: str) -> list[MatrixEntry]:
    """Keep entries of the named shapes; a shape the config does not declare is an error, not a miss."""
    if not shapes:
        return entries
    declared = sorted({e.spec.shape.label() for e in entries})
    unknown = [s for s in shapes if s not in declared]
    if unknown:
        raise ConfigError(f"{source} declares no shape {', '.join(unknown)} (it declares {', '.join(declared)})",
                          "add the shape to the config and prebuild it; static-shape backends compile per shape",
                          path=source)
    return [e for e in entries if e.spec.shape.label() in shapes]


def trusted_keys(keys: Sequence[str]) -> tuple[PublicKey, ...]:
    if not keys:
        return ()
    from ..format.signing import PublicKey

    return tuple(PublicKey.parse(k) for k in keys)


def default_dest(name: str, fingerprint: Fingerprint) -> Path:
    """Per-toolchain dir under the cachekeeper home: two toolchains never share (or fight over) one."""
    from ..stores import default_home

    return default_home() / "hydrated" / f"{name}-{fingerprint.id}"


def store_opener(url: str | None, config: Config | None) -> Callable[[], Store]:
    """Opens the named store, else the config's, else the default; never creates one (a reader's typo
    must not make an empty bucket dir). Called late, so a no-op hydrate opens nothing."""
    def open_it() -> Store:
        from ..stores import open_store

        return open_store(url or (config.store if config else None), create=False)

    return open_it


@contextlib.contextmanager
def store_on_demand(url: str | None, config: Config | None) -> Iterator[Callable[[], Store]]:
    """An opener for code that opens its store late, often, or not at all (capture's rounds): the store is
    opened on the first call, the same one is handed out after, and it is closed when the block ends."""
    opened: list[Store] = []
    open_it = store_opener(url, config)

    def get() -> Store:
        if not opened:
            opened.append(open_it())
        return opened[0]

    try:
        yield get
    finally:
        for store in opened:
            store.close()


def resolve_request(*, config: Config | None, lockfile: str | PathLike[str] | None = None, backend: str | None = None,
                    models: Sequence[str] = (), shapes: Sequence[str] = (), device: str | None = None,
                    options: Mapping[str, str] | None = None, dest: str | PathLike[str] | None = None,
                    store_url: str | None = None) -> HydrateRequest:
    """A lockfile pins exact manifests (and names its backend and toolchain, which must be this host's);
    a config names entries (optionally only some models and shapes); neither lists the store."""
    pins: list[Pin] | None = None
    locked_fp = None
    if lockfile is not None:
        backend, locked_fp, pins = read_lockfile(Path(lockfile))
    tc = host_toolchain(config, pick_backend(config, backend), options, device)
    if locked_fp is not None and locked_fp != tc.fingerprint.id:
        raise ToolchainMismatch(f"{lockfile} pins toolchain {locked_fp}; this host is {tc.fingerprint.id}",
                                "regenerate the lockfile on a host like this one (`cachekeeper lock`)",
                                path=str(lockfile), fingerprint=locked_fp)
    if config is not None and pins is None:
        entries = only_shapes(config.entries({tc.name}, set(models) or None), shapes, config.source)
        pins = [Pin(e.spec.key, kind=KIND_ENTRY) for e in entries]
    target = Path(dest) if dest is not None else default_dest(tc.name, tc.fingerprint)
    return HydrateRequest(config, tc, pins, target, frozenset(models) or None, store_url)


def run_request(req: HydrateRequest, *, verify: bool = False, require_all: bool = False, threads: int = 16,
                trusted: Sequence[str] = (), deadline: float | None = None, best_effort: bool = False,
                progress: Callable[[FetchStats], None] | None = None) -> tuple[HydrateReport, dict[str, str]]:
    """Hydrate what `req` asks for; (the report, the env that points the runtime at the dir). The config's
    hydrate settings apply unless the caller sets them."""
    from .hydrate import hydrate

    tc, config = req.toolchain, req.config
    exports = tc.backend.env_exports(req.dest.absolute())  # before any download: it refuses env that ignores the dir
    report = hydrate(open_store=store_opener(req.store_url, config), fingerprint=tc.fingerprint, dest=req.dest,
                     extra_roots=tc.backend.extra_roots(tc.options), pins=req.pins,
                     models=set(req.models) if req.models else None, verify=verify, require_all=require_all,
                     threads=threads, trusted=trusted_keys(trusted),
                     deadline=deadline if deadline is not None else (config.hydrate_deadline if config else None),
                     best_effort=best_effort or bool(config and config.hydrate_best_effort), progress=progress)
    return report, exports

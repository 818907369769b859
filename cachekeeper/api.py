"""The typed Python API: what a serving process or a platform script calls instead of the CLI.

    import cachekeeper

    report = cachekeeper.hydrate(config="tiny.yaml", dest="/var/cache/ck")     # -> HydrateReport
    os.environ.update(cachekeeper.env(config="tiny.yaml", dest=report.dest))   # before importing torch
    ...                                                                         # serve; new shapes compile
    cachekeeper.capture(report.dest, config="tiny.yaml", publish=True)          # -> CaptureReport

Each call resolves the config, lockfile, backend, fingerprint and store exactly as the CLI does (the same
helpers) and raises the same `CachekeeperError` subclasses (`.message`, `.hint`, `.exit_code`). Nothing
here imports torch or a database driver; `import cachekeeper` loads this module only on first use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backends.base import Backend
    from .capture import CaptureReport
    from .config import Config
    from .fingerprint import Fingerprint
    from .hydrate import HydrateReport

StrPath = str | PathLike[str]


def _toolchain(config: StrPath | None, backend: str | None, device: str | None,
               options: Mapping[str, str] | None) -> tuple[Config | None, str, Backend, Fingerprint, dict[str, str]]:
    from .cli.commands import _load_config, _local_toolchain, _pick_backend

    cfg = _load_config(str(config)) if config is not None else None
    name = _pick_backend(cfg, backend)
    pairs = tuple(f"{k}={v}" for k, v in (options or {}).items())
    be, fp, opts = _local_toolchain(cfg, name, pairs, device)
    return cfg, name, be, fp, opts


def _default_dest(name: str, fp: Fingerprint) -> Path:
    from .stores import default_home

    return default_home() / "hydrated" / f"{name}-{fp.id}"


def hydrate(*, config: StrPath | None = None, lockfile: StrPath | None = None, backend: str | None = None,
            dest: StrPath | None = None, models: Sequence[str] = (), shapes: Sequence[str] = (),
            device: str | None = None, options: Mapping[str, str] | None = None, store: str | None = None,
            verify: bool = False, require_all: bool = False, threads: int = 16, trusted_keys: Sequence[str] = (),
            deadline: float | None = None, best_effort: bool = False) -> HydrateReport:
    """Fill this host's cache dir with the prebuilt (and captured) artifacts its toolchain can use.

    The wanted entries come from `config` (optionally only `models`/`shapes`), from a `lockfile`, or,
    with neither, from listing the store. `deadline`/`best_effort` bound the boot as the CLI's flags do.
    `fleet.hydrate_counts(report.manifests, report.missing)` gives the hit/missed/captured figures.
    """
    from .cli.commands import _only_shapes, _store, _trusted
    from .errors import ToolchainMismatch
    from .hydrate import hydrate as run
    from .hydrate.resolve import Pin, read_lockfile
    from .manifest import KIND_ENTRY

    pins: list[Pin] | None = None
    locked_fp = None
    if lockfile is not None:
        backend, locked_fp, pins = read_lockfile(Path(lockfile))
    cfg, name, be, fp, opts = _toolchain(config, backend, device, options)
    if locked_fp is not None and locked_fp != fp.id:
        raise ToolchainMismatch(f"{lockfile} pins toolchain {locked_fp}; this host is {fp.id}",
                                "regenerate the lockfile on a host like this one (`cachekeeper lock`)")
    if cfg is not None and pins is None:
        entries = _only_shapes(cfg.entries({name}, set(models) or None), tuple(shapes), cfg.source)
        pins = [Pin(e.spec.key, kind=KIND_ENTRY) for e in entries]
    target = Path(dest) if dest is not None else _default_dest(name, fp)
    be.env_exports(target.absolute())  # refuses env that would make the runtime ignore the dir, before any download
    return run(open_store=lambda: _store(store, cfg), fingerprint=fp, dest=target, extra_roots=be.extra_roots(opts),
               pins=pins, models=set(models) or None, verify=verify, require_all=require_all, threads=threads,
               trusted=_trusted(tuple(trusted_keys)), deadline=deadline, best_effort=best_effort)


def env(*, config: StrPath | None = None, backend: str | None = None, dest: StrPath | None = None,
        device: str | None = None, options: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that point this host's runtime at the hydrated dir (what `hydrate --print-env` prints).
    Set them before the runtime reads them (Inductor: before `import torch`)."""
    _, name, be, fp, _ = _toolchain(config, backend, device, options)
    target = Path(dest) if dest is not None else _default_dest(name, fp)
    return be.env_exports(target.absolute())


def capture(dest: StrPath, *, config: StrPath | None = None, backend: str | None = None, device: str | None = None,
            options: Mapping[str, str] | None = None, publish: bool = False, store: str | None = None,
            sign_key: StrPath | None = None, catalog: str | None = None, settle: float = 2.0) -> CaptureReport:
    """List the files the runtime added to the hydrated `dest`; with `publish`, write them back as a
    captured set of this toolchain (see `cachekeeper capture --help`)."""
    from .capture import capture as run
    from .capture import never_hydrated
    from .cli.commands import _catalog, _store
    from .hydrate.state import load_state

    state = load_state(Path(dest)) if Path(dest).is_dir() else None
    if state is None:
        raise never_hydrated(Path(dest))
    cfg, _, be, fp, _ = _toolchain(config, backend or state.backend, device, options)
    key = None
    if publish and sign_key is not None:
        from .signing import SigningKey

        key = SigningKey.load(Path(sign_key))
    return run(Path(dest), fp, be.include, open_store=(lambda: _store(store, cfg)) if publish else None,
               settle_s=settle, signing_key=key,
               catalog=(lambda: _catalog(catalog, cfg)) if publish and catalog else None)


__all__ = ["capture", "env", "hydrate"]

"""The typed Python API: what a serving process or a platform script calls instead of the CLI.

    import cachekeeper

    report = cachekeeper.hydrate(config="tiny.yaml", dest="/var/cache/ck")     # -> HydrateReport
    os.environ.update(cachekeeper.env(config="tiny.yaml", dest=report.dest))   # before importing torch
    ...                                                                         # serve; new shapes compile
    cachekeeper.capture(report.dest, config="tiny.yaml", publish=True)          # -> CaptureReport

Each call resolves the config, lockfile, backend, fingerprint and store exactly as the CLI does (the same
functions, in `hydration/request.py`) and raises the same `CachekeeperError` subclasses (`.message`,
`.exit_code`, and the subject as fields: `.key`, `.url`, `.path`, `.fingerprint`; the CLI's next step for
an error is `cachekeeper.cli.hints.hint_for(exc)`). Nothing here imports torch or a database driver;
`import cachekeeper` loads this module only on first use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backends.host import HostToolchain
    from .captures.capture import CaptureReport
    from .config import Config
    from .hydration.engine import HydrateReport

StrPath = str | PathLike[str]


def _toolchain(config: Config | None, backend: str | None, device: str | None,
               options: Mapping[str, str] | None) -> HostToolchain:
    from .backends.host import host_toolchain, pick_backend

    return host_toolchain(config, pick_backend(config, backend), options, device)


def _config(path: StrPath | None) -> Config | None:
    from .hydration.request import load_config

    return load_config(path)


def hydrate(*, config: StrPath | None = None, lockfile: StrPath | None = None, backend: str | None = None,
            dest: StrPath | None = None, models: Sequence[str] = (), shapes: Sequence[str] = (),
            device: str | None = None, options: Mapping[str, str] | None = None, store: str | None = None,
            verify: bool = False, require_all: bool = False, threads: int = 16, trusted_keys: Sequence[str] = (),
            deadline: float | None = None, best_effort: bool = False,
            capture_keys: Sequence[str] = ()) -> HydrateReport:
    """Fill this host's cache dir with the prebuilt (and captured) artifacts its toolchain can use.

    The wanted entries come from `config` (optionally only `models`/`shapes`), from a `lockfile`, or,
    with neither, from listing the store. `deadline`/`best_effort` bound the boot as the CLI's flags do
    (unset, the config's `hydrate` settings apply, as in the CLI).
    `fleet.hydrate_counts(report.manifests, report.missing)` gives the hit/missed/captured figures.
    """
    from .hydration.request import resolve_request, run_request

    req = resolve_request(config=_config(config), lockfile=lockfile, backend=backend, models=models, shapes=shapes,
                          device=device, options=options, dest=dest, store_url=store, best_effort=best_effort)
    report, _ = run_request(req, verify=verify, require_all=require_all, threads=threads, trusted=trusted_keys,
                            deadline=deadline, best_effort=best_effort, capture_keys=capture_keys)
    return report


def env(*, config: StrPath | None = None, backend: str | None = None, dest: StrPath | None = None,
        device: str | None = None, options: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that point this host's runtime at the hydrated dir (what `hydrate --print-env` prints).
    Set them before the runtime reads them (Inductor: before `import torch`). `dest` is the dest hydrate
    was given or its toolchain dir (`report.dest`); the backend, unless named, is the one the dest was
    hydrated for (its layout.json), else the config's only one."""
    from .hydration.destdir import backend_of
    from .hydration.request import served_path

    cfg = _config(config)
    if backend is None and dest is not None:
        backend = backend_of(Path(dest), needed=cfg is None or len(cfg.backend_names()) != 1)
    tc = _toolchain(cfg, backend, device, options)
    return tc.backend.env_exports(served_path(dest, tc))


def capture(dest: StrPath, *, config: StrPath | None = None, backend: str | None = None, device: str | None = None,
            options: Mapping[str, str] | None = None, publish: bool = False, store: str | None = None,
            sign_key: StrPath | None = None, catalog: str | None = None, settle: float = 2.0) -> CaptureReport:
    """List the files the runtime added to the hydrated `dest`; with `publish`, write them back as a
    captured set of this toolchain (see `cachekeeper capture --help`)."""
    from . import bounds
    from .captures.resolve import resolve_capture, run_capture

    settle = float(bounds.checked(settle, bounds.SETTLE, "capture(settle=...)"))
    return run_capture(resolve_capture(dest, config=config, backend=backend, device=device, options=options,
                                       publish=publish, store_url=store, catalog_url=catalog, sign_key=sign_key,
                                       settle_s=settle))


__all__ = ["capture", "env", "hydrate"]

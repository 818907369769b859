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

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backends.host import HostToolchain
    from .captures.capture import CaptureReport
    from .config import Config
    from .config.hydrate import HydrateOptions
    from .hydration.engine import HydrateReport
    from .hydration.fetch import FetchStats
    from .hydration.request import HydrateRequest

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
            verify: bool | None = None, require_all: bool | None = None, threads: int | None = None,
            trusted_keys: Sequence[str] | None = None, capture_keys: Sequence[str] | None = None,
            deadline: float | None = None, best_effort: bool | None = None, node_cache: StrPath | None = None,
            node_cache_link: str | None = None, node_cache_max_bytes: int | str | None = None,
            max_bytes: int | str | None = None, durability: str | None = None, ready_after: int | None = None,
            hot_reports: int | None = None, env_file: StrPath | None = None, env_format: str | None = None,
            metrics_file: StrPath | None = None) -> HydrateReport:
    """Fill this host's cache dir with the prebuilt (and captured) artifacts its toolchain can use.

    The wanted entries come from `config` (optionally only `models`/`shapes`), from a `lockfile`, or,
    with neither, from listing the store; `options` are backend options (the fingerprint's), `store` a
    store URL. Every other argument is a setting of `HydrateOptions` (config/hydrate.py), as the CLI's
    flag of the same name: unset (None), the config's `hydrate:` setting applies, as in the CLI. Byte
    budgets take `50G` as the flags do; `metrics_file` and `env_file` are written as the CLI writes them.
    `fleet.hydrate_counts(report.manifests, report.missing)` gives the hit/missed/captured figures.
    """
    args = dict(locals())   # first: exactly the arguments
    from .config.hydrate import HydrateOptions
    from .hydration.request import resolve_request, settled

    given = {name: args[name] for name in HydrateOptions.__dataclass_fields__}
    cfg = _config(config)
    settled_options = settled(cfg, **given)
    req = resolve_request(config=cfg, lockfile=lockfile, backend=backend, models=models, shapes=shapes,
                          device=device, options=options, dest=dest, store_url=store,
                          best_effort=settled_options.best_effort)
    report, _ = run_hydrate(req, settled_options, None, models)
    return report


def run_hydrate(req: HydrateRequest, options: HydrateOptions, progress: Callable[[FetchStats], None] | None,
                models: Sequence[str]) -> tuple[HydrateReport, dict[str, str]]:
    """Run the request, and write `options.metrics_file` whether it succeeds or fails: the one run the
    CLI's `hydrate` and `cachekeeper.hydrate` share."""
    from .hydration.request import run_request

    try:
        report, exports = run_request(req, options, progress)
    except Exception:
        if options.metrics_file:
            write_metrics(options.metrics_file, None, req, models)
        raise
    if options.metrics_file:
        write_metrics(options.metrics_file, report, req, models)
    return report, exports


def write_metrics(path: str, report: HydrateReport | None, req: HydrateRequest, models: Sequence[str]) -> None:
    """The run's node_exporter textfile (docs/observability.md); `report` None: the hydrate failed. Only
    here is prometheus_client imported, and nothing it raises reaches the boot."""
    from .observability import logs, metrics_or_warn

    m = metrics_or_warn("--metrics-file")
    if m is None:
        return
    from .reports.fleet import hydrate_counts

    try:
        counts = hydrate_counts(report.manifests, report.missing) if report is not None else None
        reg = m.hydrate_registry(report, backend=req.toolchain.name, fingerprint=req.toolchain.fingerprint.id,
                                 model=",".join(sorted(models)) or "all", counts=counts, failed=report is None)
        m.write_textfile(path, reg, "--metrics-file")
    except Exception as exc:   # never the boot's failure: the metrics are a side channel
        logs.warning(f"--metrics-file {path}: {type(exc).__name__}: {exc}; the run itself is unaffected")


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

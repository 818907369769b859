"""What a hydrate asks for, settled before any download: the backend, this host's toolchain (fingerprint
and options), the wanted pins and the destination.

    config or lockfile ─▶ backend ─▶ host toolchain ─▶ pins (config entries, lockfile, or None: list) ─▶ dest

The CLI (`hydrate`, `env`, `capture`, `lock`, `coverage`, `explain`, `diff`) and the Python API (`api.py`)
resolve through these functions, so the two cannot drift apart. Light like the rest of the boot path:
backends and signing are imported only when used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from ..backends.host import HostToolchain, host_toolchain, pick_backend
from ..errors import (
    ConfigError,
    DestStateError,
    LockBusy,
    LockfileError,
    LockfileMismatch,
    NothingToHydrate,
    ToolchainMismatch,
    UsageError,
)
from ..format.manifest import KIND_ENTRY
from .resolve import Pin, lockfile_store, read_lockfile

if TYPE_CHECKING:
    from ..config import Config, MatrixEntry
    from ..config.hydrate import HydrateOptions
    from ..stores.base import OnDemand, Store
    from .engine import HydrateReport
    from .fetch import FetchStats


@dataclass(frozen=True)
class HydrateRequest:
    config: Config | None
    toolchain: HostToolchain
    pins: list[Pin] | None       # None: every entry the store has for this toolchain
    dest: Path
    models: frozenset[str] | None = None    # only these models (listing mode; a config's pins are filtered)
    store_url: str | None = None            # None: the config's store, else the default
    locked_fingerprint: str | None = None   # the toolchain a lockfile pins (checked when the hydrate runs)
    lockfile: str | None = None
    unreadable: str = ""                    # best effort: why the lockfile could not be read (nothing hydrated)


def load_config(path: str | PathLike[str] | None) -> Config | None:
    if path is None:
        return None
    from ..config import load_config as load

    return load(str(path))


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


def default_dest(name: str) -> Path:
    """Per-backend dir under the cachekeeper home; each toolchain has its own subdir in it (destdir.py)."""
    from ..stores import default_home

    return default_home() / "hydrated" / name


def served_path(dest: str | PathLike[str] | None, tc: HostToolchain) -> Path:
    """The dir the runtime's env var names: the toolchain's own subdir of the dest (destdir.py)."""
    from .destdir import resolve_dest, toolchain_dir

    target = Path(dest) if dest is not None else default_dest(tc.name)
    return toolchain_dir(resolve_dest(target), tc.fingerprint.id)


def store_opener(url: str | None, config: Config | None) -> Callable[[], Store]:
    """Opens the named store, else the config's, else the default (`stores.opener`)."""
    from ..stores import opener

    return opener(url or (config.store if config else None))


def store_on_demand(url: str | None, config: Config | None) -> OnDemand:
    """`stores.on_demand` for the named store, else the config's, else the default."""
    from ..stores import on_demand

    return on_demand(url or (config.store if config else None))


def resolve_request(*, config: Config | None, lockfile: str | PathLike[str] | None = None, backend: str | None = None,
                    models: Sequence[str] = (), shapes: Sequence[str] = (), device: str | None = None,
                    options: Mapping[str, str] | None = None, dest: str | PathLike[str] | None = None,
                    store_url: str | None = None, best_effort: bool = False) -> HydrateRequest:
    """A lockfile pins exact manifests (and names its backend and toolchain, which must be this host's);
    a config names entries (optionally only some models and shapes); neither lists the store. With
    `best_effort` and the backend named, a lockfile that cannot be read hydrates nothing (the request says
    why in `unreadable`): the boot still gets its env."""
    pins: list[Pin] | None = None
    locked_fp = None
    unreadable = ""
    if lockfile is not None:
        if config is not None:
            raise UsageError(f"config {config.source} and lockfile {lockfile} both name what to hydrate; "
                             "a lockfile pins exact manifests, so give one of them")
        try:
            locked_backend, locked_fp, pins = read_lockfile(Path(lockfile))
        except LockfileError as exc:
            if not (best_effort and backend):
                raise
            locked_backend, locked_fp, pins, unreadable = backend, None, [], exc.message
        # The store `lock` read the pins from, unless --store / CACHEKEEPER_STORE names another.
        if not unreadable:
            store_url = store_url or lockfile_store(Path(lockfile))
        if backend and backend != locked_backend:
            raise UsageError(f"backend {backend} and lockfile {lockfile} (which pins backend {locked_backend}) "
                             "disagree; give one of them")
        backend = locked_backend
    if shapes and config is None:
        raise UsageError("shapes select entries of a config, and no config is given")
    tc = host_toolchain(config, pick_backend(config, backend), options, device)
    if config is not None and pins is None:
        entries = only_shapes(config.entries({tc.name}, set(models) or None), shapes, config.source)
        priority = _model_priorities(config)
        # Hot first: higher `priority:` first, the config's order within one priority (a stable sort).
        entries.sort(key=lambda e: -priority.get(e.spec.model, 0))
        pins = [Pin(e.spec.key, kind=KIND_ENTRY) for e in entries]
    target = Path(dest) if dest is not None else default_dest(tc.name)
    return HydrateRequest(config, tc, pins, target, frozenset(models) or None, store_url, locked_fp,
                          None if lockfile is None else str(lockfile), unreadable)


def _lock_mismatch(req: HydrateRequest) -> ToolchainMismatch | None:
    locked, here = req.locked_fingerprint, req.toolchain.fingerprint.id
    if locked is None or locked == here:
        return None
    return LockfileMismatch(f"{req.lockfile} pins toolchain {locked}; this host is {here}",
                            path=req.lockfile, fingerprint=locked)


def settled(config: Config | None, **given: object) -> HydrateOptions:
    """The options one hydrate runs with: the config's `hydrate:` section, with each setting the caller
    gives (a flag, an env var, an API argument; None: not given) over it. The CLI and the API both call
    this, so a setting resolves the same way from either."""
    from ..config.hydrate import HydrateOptions

    return (config.hydrate if config is not None else HydrateOptions()).over(**given)


def run_request(req: HydrateRequest, options: HydrateOptions,
                progress: Callable[[FetchStats], None] | None = None) -> tuple[HydrateReport, dict[str, str]]:
    """Hydrate what `req` asks for, as `options` say (`settled`: the config's, with the caller's over
    them); (the report, the env that points the runtime at the dir).

    With `ready_after` N (hot first), the first N wanted entries are hydrated, then the env and the ready
    marker are written (hydration/ready.py, in the dest's own `.cachekeeper/`), then the rest, in this
    process; `complete` follows."""
    from .destdir import claim_layout
    from .engine import HydrateReport, Outcome, Target, hydrate

    tc, config = req.toolchain, req.config
    served = served_path(req.dest, tc)
    exports = tc.backend.env_exports(served)  # before any download: it refuses env that ignores the dir
    if options.ready_after and req.pins is None:
        raise UsageError("hot first (ready after N entries) needs the wanted entries in order: a config or a "
                         "lockfile names them, a listing of the store does not")
    mismatch = _lock_mismatch(req)
    if mismatch is not None or req.unreadable:
        if mismatch is not None and not options.best_effort:
            raise mismatch
        why = mismatch.message if mismatch is not None else req.unreadable
        return HydrateReport.of(served, tc.fingerprint.id, Outcome(incomplete=why)), exports
    _refuse_overlap(options.node_cache, served.parent)
    layout_warnings: list[str] = []
    try:
        claim_layout(served.parent, tc.fingerprint.id, tc.name,
                     lock_timeout=600.0 if options.deadline is None else options.deadline, warnings=layout_warnings)
    except (LockBusy, DestStateError) as exc:   # the dest lock held past the deadline, records unusable
        if not options.best_effort:
            raise
        return HydrateReport.of(served, tc.fingerprint.id, Outcome(incomplete=exc.message)), exports
    target = Target(tc.fingerprint, served, extra_roots=tc.backend.extra_roots(tc.options), models=req.models,
                    captured=config is None or config.capture_publish)
    with store_on_demand(req.store_url, config) as get:   # one store, one client, for every step below
        def run(pins: list[Pin] | None) -> HydrateReport:
            return hydrate(dataclasses.replace(target, pins=pins), options, get, progress, lent=True)

        try:
            report, exports = _run_phases(req, options, served, exports, get, run)
        except NothingToHydrate as exc:
            if req.lockfile is None:
                raise
            raise type(exc)(f"{exc.message} (the manifests lockfile {req.lockfile} pins)", exc.hint,
                            **exc.fields) from None
    return report.with_warnings_first(layout_warnings), exports


def _refuse_overlap(node_cache: str | None, dest: Path) -> None:
    """A node cache inside the dest (the server would read its objects) or holding the dest (gc of either
    would delete the other's files) is refused."""
    if not node_cache:
        return
    import os

    node, top = os.path.realpath(node_cache), os.path.realpath(dest)
    if node == top or node.startswith(top + os.sep) or top.startswith(node + os.sep):
        from ..errors import DestinationError

        where = "is" if node == top else "is inside" if node.startswith(top + os.sep) else "holds"
        raise DestinationError(f"node cache {node_cache} {where} the dest {dest}; they must not overlap",
                               "put the node cache beside the dest (e.g. /var/cache/ck-node), not in it",
                               path=node_cache)


def _run_phases(req: HydrateRequest, options: HydrateOptions, served: Path, exports: dict[str, str],
                get: Callable[[], Store], run: Callable[[list[Pin] | None], HydrateReport]) \
        -> tuple[HydrateReport, dict[str, str]]:
    """Hot first (the first `ready_after` entries, then the ready marker), then everything wanted."""
    from . import ready

    top = served.parent   # the ready markers sit in the dest's own .cachekeeper/, beside layout.json
    marked = bool(options.ready_after or options.env_file)
    env_file = Path(options.env_file) if options.env_file else None
    env_text = ready.render(exports, options.env_format)
    if marked:
        ready.clear(top)
    first: HydrateReport | None = None
    pins = req.pins
    hot_warnings: list[str] = []
    if options.ready_after and pins is not None and options.ready_after < len(pins):
        pins, hot_warnings = _hot_first(req, options.hot_reports, pins, served, get)
        first = run(pins[:options.ready_after])
        ready.mark(top, ready.READY, first.manifests, env_text, env_file)
    report = run(pins)
    if first is not None:   # one report for the command: the work of both phases
        report = report.after(first, hot_warnings)
    if marked:
        if first is None:
            ready.mark(top, ready.READY, report.manifests, env_text, env_file)
        ready.mark(top, ready.COMPLETE, report.manifests, env_text, env_file)
    return report, exports


def _model_priorities(config: Config) -> dict[str, int]:
    """Each model's `priority:` (the config's hot order: higher first)."""
    return {m.model.name: m.priority for m in config.models}


def _hot_first(req: HydrateRequest, reports: int, pins: list[Pin], served: Path, get: Callable[[], Store]) \
        -> tuple[list[Pin], list[str]]:
    """`pins` hottest first (hydration/hot.py): the config's priority, then the calls this toolchain's recent
    miss reports counted (one listing, only when a config names the shapes), then this dest's last use."""
    from . import hot, usage

    config, tc = req.config, req.toolchain
    priority: dict[str, int] = {}
    calls: dict[str, int] = {}
    warnings: list[str] = []
    if config is not None:
        prio = _model_priorities(config)
        entries = config.entries({tc.name})
        priority = {e.spec.key: prio.get(e.spec.model, 0) for e in entries}
        shapes = {e.spec.key: (e.spec.model, e.spec.shape.height, e.spec.shape.width, e.spec.shape.batch)
                  for e in entries}
        if reports:
            calls, warnings = hot.read_calls(get, tc.fingerprint.id, shapes, reports)
    rank = {n: i for i, n in enumerate(hot.order(list(dict.fromkeys(p.name for p in pins)), priority, calls,
                                                 usage.last_uses(served)))}
    return sorted(pins, key=lambda p: rank[p.name]), warnings

"""What a hydrate asks for, settled before any download: the backend, this host's toolchain (fingerprint
and options), the wanted pins and the destination.

    config or lockfile ─▶ backend ─▶ host toolchain ─▶ pins (config entries, lockfile, or None: list) ─▶ dest

The CLI (`hydrate`, `env`, `capture`, `lock`, `coverage`, `explain`, `diff`) and the Python API (`api.py`)
resolve through these functions, so the two cannot drift apart. Light like the rest of the boot path:
backends and signing are imported only when used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, cast

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
    from ..format.signing import PublicKey
    from ..stores.base import OnDemand, Store
    from .durability import Durability
    from .engine import HydrateReport
    from .fetch import FetchStats
    from .nodecache import LinkMode, NodeCache


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


def trusted_keys(keys: Sequence[str], capture_keys: Sequence[str] = ()) -> tuple[PublicKey, ...]:
    """Builder keys (`keys`) and capture keys, each with its role (signing.keyring)."""
    if not keys and not capture_keys:
        return ()
    from ..format.signing import keyring

    return keyring(keys, capture_keys)


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


@dataclass(frozen=True)
class NodeSettings:
    """The node-scale settings of one hydrate (flags, env or config; None: the config's, else off)."""

    node_cache: str | None = None
    node_cache_link: str = "auto"
    node_cache_max_bytes: int | None = None
    max_bytes: int | None = None
    durability: str | None = None
    ready_after: int | None = None
    env_file: str | None = None
    env_format: str = "shell"

    def over(self, config: Config | None) -> NodeSettings:
        if config is None:
            return self
        return NodeSettings(
            node_cache=self.node_cache or config.hydrate_node_cache, node_cache_link=self.node_cache_link,
            node_cache_max_bytes=self.node_cache_max_bytes or config.hydrate_node_cache_max_bytes,
            max_bytes=self.max_bytes or config.hydrate_max_bytes,
            durability=self.durability or config.hydrate_durability,
            ready_after=self.ready_after or config.hydrate_ready_after, env_file=self.env_file,
            env_format=self.env_format)


def run_request(req: HydrateRequest, *, verify: bool = False, require_all: bool = False, threads: int = 16,
                trusted: Sequence[str] = (), deadline: float | None = None, best_effort: bool = False,
                capture_keys: Sequence[str] = (),
                progress: Callable[[FetchStats], None] | None = None,
                node: NodeSettings | None = None) -> tuple[HydrateReport, dict[str, str]]:
    """Hydrate what `req` asks for; (the report, the env that points the runtime at the dir). The config's
    hydrate settings apply unless the caller sets them.

    With `ready_after` N (hot first), the first N wanted entries are hydrated, then the env and the ready
    marker are written (hydration/ready.py, in the dest's own `.cachekeeper/`), then the rest, in this
    process; `complete` follows."""
    from .. import bounds
    from .destdir import claim_layout
    from .durability import DEFAULT, fsyncs
    from .engine import HydrateReport, hydrate

    tc, config = req.toolchain, req.config
    # The CLI's flags were checked by click; the Python API's arguments are checked here, with the same bounds.
    threads = int(bounds.checked(threads, bounds.THREADS, "hydrate(threads=...)"))
    if deadline is not None:
        deadline = float(bounds.checked(deadline, bounds.DEADLINE, "hydrate(deadline=...)"))
    best_effort = best_effort or bool(config and config.hydrate_best_effort)
    if best_effort and require_all:
        raise UsageError("require-all (fail on any miss) and best effort (the flag, env CACHEKEEPER_BEST_EFFORT or "
                         "the config's hydrate.best_effort) contradict each other; drop one")
    deadline = deadline if deadline is not None else (config.hydrate_deadline if config else None)
    settings = (node or NodeSettings()).over(config)
    served = served_path(req.dest, tc)
    exports = tc.backend.env_exports(served)  # before any download: it refuses env that ignores the dir
    if settings.ready_after and req.pins is None:
        raise UsageError("hot first (ready after N entries) needs the wanted entries in order: a config or a "
                         "lockfile names them, a listing of the store does not")
    mismatch = _lock_mismatch(req)
    if mismatch is not None or req.unreadable:
        if mismatch is not None and not best_effort:
            raise mismatch
        why = mismatch.message if mismatch is not None else req.unreadable
        return HydrateReport(dest=served, fingerprint_id=tc.fingerprint.id, incomplete=why), exports
    _refuse_overlap(settings.node_cache, served.parent)
    layout_warnings: list[str] = []
    try:
        claim_layout(served.parent, tc.fingerprint.id, tc.name, lock_timeout=600.0 if deadline is None else deadline,
                     warnings=layout_warnings)
    except (LockBusy, DestStateError) as exc:   # the dest lock held past the deadline, records unusable
        if not best_effort:
            raise
        return HydrateReport(dest=served, fingerprint_id=tc.fingerprint.id, incomplete=exc.message), exports
    durability = cast("Durability", settings.durability or DEFAULT)
    keys = trusted_keys(trusted, capture_keys)
    with store_on_demand(req.store_url, config) as get:   # one store, one client, for every step below
        def run(pins: list[Pin] | None) -> HydrateReport:
            return hydrate(open_store=get, lent=True, fingerprint=tc.fingerprint, dest=served,
                           extra_roots=tc.backend.extra_roots(tc.options), pins=pins,
                           models=set(req.models) if req.models else None, verify=verify, require_all=require_all,
                           threads=threads, trusted=keys, deadline=deadline, best_effort=best_effort,
                           progress=progress, durability=durability,
                           node_cache=_node_cache(settings, fsyncs(durability), verify),
                           max_bytes=settings.max_bytes, captured=config is None or config.capture_publish)

        try:
            report, exports = _run_phases(req, settings, served, exports, get, run)
        except NothingToHydrate as exc:
            if req.lockfile is None:
                raise
            raise type(exc)(f"{exc.message} (the manifests lockfile {req.lockfile} pins)", exc.hint,
                            **exc.fields) from None
    report.warnings[:0] = layout_warnings
    return report, exports


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


def _run_phases(req: HydrateRequest, settings: NodeSettings, served: Path, exports: dict[str, str],
                get: Callable[[], Store], run: Callable[[list[Pin] | None], HydrateReport]) \
        -> tuple[HydrateReport, dict[str, str]]:
    """Hot first (the first `ready_after` entries, then the ready marker), then everything wanted."""
    from . import ready

    top = served.parent   # the ready markers sit in the dest's own .cachekeeper/, beside layout.json
    marked = bool(settings.ready_after or settings.env_file)
    env_file = Path(settings.env_file) if settings.env_file else None
    env_text = ready.render(exports, settings.env_format)
    if marked:
        ready.clear(top)
    first: HydrateReport | None = None
    pins = req.pins
    hot_warnings: list[str] = []
    if settings.ready_after and pins is not None and settings.ready_after < len(pins):
        pins, hot_warnings = _hot_first(req, pins, served, get)
        first = run(pins[:settings.ready_after])
        ready.mark(top, ready.READY, first.manifests, env_text, env_file)
    report = run(pins)
    if first is not None:   # one report for the command: the work of both phases
        report.ready_seconds = first.seconds
        for name in _SUMMED:
            setattr(report, name, getattr(report, name) + getattr(first, name))
        report.warnings = hot_warnings + first.warnings + [w for w in report.warnings if w not in first.warnings]
    if marked:
        if first is None:
            ready.mark(top, ready.READY, report.manifests, env_text, env_file)
        ready.mark(top, ready.COMPLETE, report.manifests, env_text, env_file)
    return report, exports


# What the two phases of hot first each did, added up in the command's report (the second phase's own
# counts would hide what the first fetched).
_SUMMED = ("seconds", "files_fetched", "bytes_fetched", "files_verified_local", "retries", "node_linked",
           "node_copied", "node_fetched_bytes")


def _model_priorities(config: Config) -> dict[str, int]:
    """Each model's `priority:` (the config's hot order: higher first)."""
    return {m.model.name: m.priority for m in config.models}


def _hot_first(req: HydrateRequest, pins: list[Pin], served: Path, get: Callable[[], Store]) \
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
        if config.hydrate_hot_reports:
            calls, warnings = hot.read_calls(get, tc.fingerprint.id, shapes,
                                             config.hydrate_hot_reports)
    rank = {n: i for i, n in enumerate(hot.order(list(dict.fromkeys(p.name for p in pins)), priority, calls,
                                                 usage.last_uses(served)))}
    return sorted(pins, key=lambda p: rank[p.name]), warnings


def _node_cache(settings: NodeSettings, durable: bool, verify: bool) -> NodeCache | None:
    if not settings.node_cache:
        return None
    from .nodecache import NodeCache

    return NodeCache(Path(settings.node_cache).absolute(), cast("LinkMode", settings.node_cache_link),
                     durable=durable, verify=verify, max_bytes=settings.node_cache_max_bytes)

"""Hydrate: fill a backend's cache dir with exactly the artifacts this host can use.

    wanted manifests (names or listing) ─▶ plan (pure) ─▶ parallel fetch ─▶ verify ─▶ rename ─▶ state

Boot-path rules: no torch, no SQLAlchemy, no cloud SDK unless the store needs it; a repeat run whose
state file still matches the disk returns without opening the store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import (
    BlobsMissing,
    DestinationError,
    DestStateError,
    HydrateIncomplete,
    LockBusy,
    NothingToHydrate,
    StoreError,
    ToolchainMismatch,
    UnsafePath,
)
from ..format.fingerprint import Fingerprint
from ..format.manifest import Manifest
from ..fs.locks import FileLock, LiveTag, sweep_temp
from ..fs.paths import SafeJoiner, ensure_dir, lstat_or_none, new_tag
from ..presence import plan_presence
from ..stores.base import OnDemand, Store
from ..stores.reader import Deadline

if TYPE_CHECKING:
    from ..config.hydrate import HydrateOptions
    from ..format.signing import PublicKey
    from .fetch import FetchStats
    from .nodecache import NodeCache
from ..fs.durability import DEFAULT as DEFAULT_DURABILITY
from ..fs.durability import Durability, boot_bound, boot_id, filesystem, fsyncs
from . import usage
from .plan import HydratePlan, plan_hydrate
from .resolve import Pin, fetch_manifests, list_entries, other_toolchains, with_shared
from .state import (
    STATE_DIR,
    PlacedFile,
    State,
    drop_state,
    file_key,
    own_records_dir,
    read_state,
    record_use,
    records_lock,
    save_state,
    stat_matches,
    state_dir,
)
from .state import trusted as state_trusted

__all__ = ["HydrateReport", "Outcome", "Target", "Work", "hydrate"]


@dataclass(frozen=True)
class Work:
    """What a run did, in figures: hot first's two phases add up (`+`) into the command's one report."""

    files_fetched: int = 0
    bytes_fetched: int = 0
    files_verified_local: int = 0
    seconds: float = 0.0
    retries: int = 0                     # read attempts retried (resets, stalls, 5xx)
    node_linked: int = 0                 # files placed from the node cache sharing its copy (link/reflink)
    node_copied: int = 0                 # ... copied from it
    node_fetched_bytes: int = 0          # bytes this run fetched from the store into the node cache

    def __add__(self, other: Work) -> Work:
        return Work(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(Work)})


@dataclass(frozen=True)
class Outcome:
    """What a run left in the dest: the manifests in place (all wanted ones on a no-op), the wanted entries
    not built, and what it evicted to fit the budget."""

    manifests: list[str] = field(default_factory=list)
    files_total: int = 0
    noop: bool = False
    missing: list[str] = field(default_factory=list)
    work: Work = Work()
    incomplete: str = ""
    evicted: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class HydrateReport:
    """One hydrate, as `--json` and the API return it: composed once, from the run's phase values."""

    dest: Path
    fingerprint_id: str
    noop: bool = False
    manifests: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)      # wanted entry names not built for this toolchain
    files_total: int = 0
    files_fetched: int = 0
    bytes_fetched: int = 0
    files_verified_local: int = 0
    seconds: float = 0.0
    retries: int = 0                     # read attempts retried (resets, stalls, 5xx)
    deadline_left: float | None = None   # seconds of the --deadline budget left at the end
    incomplete: str = ""                 # why some wanted files are not in place (deadline, store); "" when none
    nothing_built: bool = False          # best effort: the store has nothing of this toolchain to hydrate
    durability: str = ""                 # fsync | boot | both (fs/durability.py)
    node_linked: int = 0                 # files placed from the node cache sharing its copy (link/reflink)
    node_copied: int = 0                 # ... copied from it
    node_fetched_bytes: int = 0          # bytes this run fetched from the store into the node cache
    warnings: list[str] = field(default_factory=list)   # one line each (node cache fallbacks, budget)
    evicted: list[str] = field(default_factory=list)    # entries removed to fit --max-bytes
    ready_seconds: float | None = None                  # --ready-after: when the hot entries were in place

    @classmethod
    def of(cls, dest: Path, fingerprint_id: str, outcome: Outcome, *, durability: str = "",
           warnings: Iterable[str] = (), deadline_left: float | None = None,
           nothing_built: bool = False) -> HydrateReport:
        return cls(dest=dest, fingerprint_id=fingerprint_id, noop=outcome.noop, manifests=list(outcome.manifests),
                   missing=list(outcome.missing), files_total=outcome.files_total, deadline_left=deadline_left,
                   incomplete=outcome.incomplete, nothing_built=nothing_built, durability=durability,
                   warnings=list(warnings), evicted=list(outcome.evicted), **_figures(outcome.work))

    @property
    def work(self) -> Work:
        return Work(**{f.name: getattr(self, f.name) for f in fields(Work)})

    def after(self, first: HydrateReport, warnings: Iterable[str] = ()) -> HydrateReport:
        """This report (hot first's second phase) with the first phase's work added: one report for the
        command (the second phase's own counts would hide what the first fetched)."""
        return dataclasses.replace(
            self, ready_seconds=first.seconds, **_figures(self.work + first.work),
            warnings=[*warnings, *first.warnings, *(w for w in self.warnings if w not in first.warnings)])

    def with_warnings_first(self, warnings: Iterable[str]) -> HydrateReport:
        return dataclasses.replace(self, warnings=[*warnings, *self.warnings])

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        d["dest"] = str(self.dest)
        return d


def _figures(work: Work) -> dict[str, Any]:
    return {f.name: getattr(work, f.name) for f in fields(Work)}


def _probe(verify: bool, trust: bool = True) -> Callable[[Path, PlacedFile | None], str]:
    """What is at a target now, never following a symlink there. Without `trust` (a boot-bound state
    file of another boot) a listed file is checked by size, then by digest."""
    def probe(path: Path, placed: PlacedFile | None) -> str:
        st = lstat_or_none(path)
        if st is None or stat.S_ISLNK(st.st_mode):
            return "missing"  # a symlink is replaced by the rename (atomically), never followed or adopted
        if stat.S_ISDIR(st.st_mode):
            raise DestinationError(f"{path} is a directory where a manifest places a file",
                                   "remove it, or hydrate into a fresh directory")
        if not stat.S_ISREG(st.st_mode):
            raise DestinationError(f"{path} is a FIFO, socket or device where a manifest places a file; "
                                   "hydrate does not replace it", "remove it, or hydrate into a fresh directory")
        if placed is not None and not verify and trust and stat_matches(path, placed):
            return "ok"
        if placed is not None and not trust and st.st_size != placed.size:
            return "missing"  # the size says it is not the placed file: no need to hash it
        return "check"
    return probe


def _parent_checker(joiner: SafeJoiner) -> Callable[[Path, str], None]:
    """Every directory between a root and a target must be a real directory: writing through a
    symlink could land anywhere, and a file in the way is a conflict found before any fetch.
    The lstats come from `joiner`, which took them (once per directory) while joining the same paths."""
    def check(root: Path, rel: str) -> None:
        d = str(root)
        for part in rel.split("/")[:-1]:
            d = os.path.join(d, part)  # plain strings, as `joiner` keys them: pathlib costs more than the check
            st = joiner.lstat(d)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise UnsafePath(f"{d} is a symlink; hydrate never writes through one",
                                 "remove the symlink, or hydrate into a fresh directory")
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise DestinationError(f"{d} is a file where a manifest needs a directory",
                                       "remove it, or hydrate into a fresh directory")
    return check


def _prepare_dest(dest: Path) -> None:
    ensure_dir(dest)
    own_records_dir(dest)
    if not os.access(dest, os.W_OK):
        raise DestinationError(f"destination {dest} is not writable")


def _read_state(dest: Path, fingerprint: Fingerprint, log: _Log) -> State | None:
    """The dest's state, or None when there is none to trust: lost, unreadable, of a newer version,
    malformed, describing another dir, or (in a toolchain's own dir, named by its fingerprint id) naming
    another toolchain. Then the files present are re-hashed and adopted if right (one warning line)."""
    state, why = read_state(dest)
    path = state_dir(dest) / "state.json"
    if state is not None and state.roots.get("cache", str(dest)) != str(dest):
        why = f"{path} describes another dir ({state.roots['cache'][:80]})"
    elif state is not None and _is_toolchain_dir(dest, fingerprint) and state.fingerprint_id != fingerprint.id:
        why = f"{path} names toolchain {state.fingerprint_id[:40]}"
    if why:
        state = None
    if state is None and (why or (_is_toolchain_dir(dest, fingerprint) and _holds_files(dest))):
        log.warnings.append(f"{why or 'no ' + str(state_dir(dest) / 'state.json')}; the files in {dest} are "
                            "re-verified (right ones kept, the rest fetched)")
    return state


def _is_toolchain_dir(dest: Path, fingerprint: Fingerprint) -> bool:
    """A dir named by this host's fingerprint id (`<dest>/<fp>`, destdir.py): its name says its toolchain,
    so what it holds is this toolchain's to verify, whatever its state file says or lacks."""
    return dest.name == fingerprint.id


def _guard_toolchain(dest: Path, state: State | None, fingerprint: Fingerprint) -> None:
    if _is_toolchain_dir(dest, fingerprint):
        return
    if state is not None and state.fingerprint_id != fingerprint.id:
        raise ToolchainMismatch(
            f"{dest} holds artifacts of toolchain {state.fingerprint_id}; this host is {fingerprint.id}")
    if state is None and _holds_files(dest):
        raise ToolchainMismatch(f"{dest} already holds files cachekeeper did not place (unknown toolchain)",
                                "hydrate into an empty directory; one directory holds one toolchain")


def _holds_files(dest: Path) -> bool:
    """Any file outside the state dir (empty directories a run that placed nothing left do not count)."""
    for here, dirs, files in os.walk(dest):
        if here == str(dest):
            dirs[:] = [d for d in dirs if d != STATE_DIR]
        if files or any(os.path.islink(os.path.join(here, d)) for d in dirs):
            return True
    return False


def _still_in_place(state: State, pins: list[Pin], trusted_ids: set[str]) -> bool:
    """The fast no-op: every wanted manifest was applied (and, if keys are required, passed one of them),
    and every placed file is unchanged."""
    for pin in pins:
        digest = state.manifests.get(pin.name)
        if digest is None or (pin.digest is not None and pin.digest != digest):
            return False
        if trusted_ids and not trusted_ids & set(state.signed.get(pin.name, ())):
            return False
    for key, placed in state.files.items():
        root, _, rel = key.partition("/")
        if root not in state.roots or not stat_matches(Path(state.roots[root]) / rel, placed):
            return False
    return True


@dataclass(frozen=True)
class Target:
    """What one engine run fills: the toolchain's dir `dest` (the backend's cache root) plus `extra_roots`,
    with `pins` (the wanted entry names, from a config or a lockfile; None lists every entry of this
    toolchain, optionally only `models`'). `captured`: also take the captured sets (runtime compiles
    serving hosts published) that extend the wanted entries. False (a config's `capture: report`): only
    what builders published; a no-op then opens no store, and a full run names the captured sets it left
    in one warning. A lockfile takes what it pins."""

    fingerprint: Fingerprint
    dest: Path
    pins: list[Pin] | None = None
    extra_roots: Mapping[str, Path] = field(default_factory=dict)
    models: frozenset[str] | None = None
    captured: bool = True


def hydrate(target: Target, options: HydrateOptions, open_store: Callable[[], Store],
            progress: Callable[[FetchStats], None] | None = None, *, lent: bool = False) -> HydrateReport:
    """Fill `target` as `options` say (config/hydrate.py).

    `options.deadline`: seconds for the whole run, a stalled store included. When it runs out or the store
    fails, what was placed and verified is kept and recorded; then `HydrateIncomplete` is raised, or with
    `best_effort` the report says why in `incomplete` (the server starts and compiles the rest). Best
    effort covers nothing built for this toolchain (`nothing_built`), a failing store and a busy lock too.
    `durability`: fsync each file, or trust the state file only within this boot, or both (durability.py).
    `node_cache`: fill the dest from this node's shared copy, fetching into it what it lacks (nodecache.py).
    `max_bytes`: the dest's budget; entries not wanted now are evicted by last use to fit (usage.py).
    `open_store` is called when a store is needed (a no-op may need none). Hydrate opens one at most and
    closes it before returning; with `lent`, `open_store` hands out a store its caller keeps open across
    several hydrates (hot first's two phases share one client) and closes itself.
    """
    t0 = time.monotonic()
    durability = options.durability or DEFAULT_DURABILITY
    run = _Run(dataclasses.replace(target, dest=target.dest.absolute()), options, options.keyring(), durability,
               _node_cache(options, fsyncs(durability)), progress, Deadline(options.deadline))
    log = _Log()
    outcome, nothing_built = Outcome(), False
    with contextlib.ExitStack() as owned:
        get = open_store if lent else owned.enter_context(OnDemand(open_store))
        try:
            outcome = _hydrate(run, get, log)
        except SOFT_ERRORS as exc:
            if not options.best_effort:
                raise
            # Nothing built, a store that fails, the deadline, a busy lock: the server starts and compiles
            # what is missing. Corrupt bytes, hostile manifests and an unusable dest are never softened.
            outcome, nothing_built = Outcome(missing=log.missing, incomplete=exc.message), \
                isinstance(exc, NothingToHydrate)
    left = run.budget.left()
    work = dataclasses.replace(outcome.work, seconds=time.monotonic() - t0, retries=run.budget.retries.retries)
    return HydrateReport.of(run.target.dest, target.fingerprint.id, dataclasses.replace(outcome, work=work),
                            durability=durability, warnings=log.warnings, nothing_built=nothing_built,
                            deadline_left=None if left is None else max(0.0, round(left, 3)))


def _node_cache(options: HydrateOptions, durable: bool) -> NodeCache | None:
    if not options.node_cache:
        return None
    from .nodecache import NodeCache

    return NodeCache(Path(options.node_cache).absolute(), options.node_cache_link, durable=durable,
                     verify=options.verify, max_bytes=options.node_cache_max_bytes)


# What `best_effort` turns into a warning (see `hydrate`); everything else keeps its own error. A dir
# that holds another toolchain's or foreign files is not softened: the server would read them.
SOFT_ERRORS = (StoreError, HydrateIncomplete, NothingToHydrate, LockBusy, DestStateError)


@dataclass(frozen=True)
class _Run:
    """One run's inputs as the phases read them: the target, the options, and what they resolve to (the
    keyring, the durability, the node cache) once."""

    target: Target
    options: HydrateOptions
    keys: tuple[PublicKey, ...]
    durability: Durability
    node_cache: NodeCache | None
    progress: Callable[[FetchStats], None] | None
    budget: Deadline


@dataclass
class _Log:
    """What a run says on its way, kept even when a soft error ends it: its warning lines, and the wanted
    entries the store lacks (best effort reports them with the error)."""

    warnings: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Resolved:
    """The resolve phase: the store, the manifests to place (shared ones included), the captured sets seen."""

    store: Store
    manifests: list[Manifest]
    seen: list[str]


def _hydrate(run: _Run, open_store: Callable[[], Store], log: _Log) -> Outcome:
    target, options, budget, durability = run.target, run.options, run.budget, run.durability
    dest, fingerprint, pins = target.dest, target.fingerprint, target.pins
    sets: CapturedSets = "pinned" if not _takes_captured(pins) else "take" if target.captured else "skip"
    _prepare_dest(dest)
    roots = {"cache": dest, **{k: v.absolute() for k, v in target.extra_roots.items()}}
    with records_lock(dest, timeout=_lock_wait(budget)):
        state = _read_state(dest, fingerprint, log)
        _guard_toolchain(dest, state, fingerprint)
        trusted_ids = {k.id for k in run.keys}
        # A state naming other dirs as roots than this run's speaks for none of their files: re-verified.
        trust = state is not None and state_trusted(state, dest) \
            and all(str(roots.get(k, "")) == v for k, v in state.roots.items())
        if state is not None and pins is not None and not options.verify and trust \
                and _still_in_place(state, pins, trusted_ids) \
                and not _captured_since(open_store, fingerprint, state, sets, budget):
            names = [p.name for p in pins]
            record_use(dest, names)
            return Outcome(manifests=names, files_total=len(state.files), noop=True,
                           evicted=_fit(dest, state, options.max_bytes, set(names), roots, log))
        claimed = False   # set once this run claims a dir no state named
        try:
            with contextlib.ExitStack() as stack:
                from .fetch import execute  # not on the no-op path: it pulls in the thread pool machinery

                resolved = budget.run(lambda: _open_and_resolve(open_store, run, log, sets), "reading manifests")
                store, manifests = resolved.store, resolved.manifests
                joiner = SafeJoiner()
                plan = plan_hydrate(manifests, roots, state, _probe(options.verify, trust), _parent_checker(joiner),
                                    joiner)
                if state is None:
                    # Claim the directory for this toolchain before the first byte lands, so a hydrate killed
                    # midway is resumed (present files verified and adopted) rather than refused as foreign.
                    # Only now: a run that found nothing to place (nothing built, a store down) claims nothing.
                    save_state(dest, _stamped(State(fingerprint_id=fingerprint.id, backend=fingerprint.backend,
                                                    roots={k: str(v) for k, v in roots.items()}), dest, durability))
                    claimed = True
                # Only the roots this run writes to are created, marked live and swept.
                used = {"cache"} | {p.record.root for ps in plan.fetch.values() for p in ps} \
                    | {p.record.root for p in plan.check}
                tag = _claim_roots(stack, dest, {k: v for k, v in roots.items() if k in used}, budget)
                from_node, node_work = _from_node_cache(run, plan, store, roots.values(), log)
                placed, stats = execute(store, plan, options.threads, deadline=budget, tag=tag,
                                        progress=run.progress, roots=roots.values(), durable=fsyncs(durability))
                placed.update(from_node)
                have = set(placed) | {file_key(p.record.root, p.record.path) for p in plan.keep}
                applied = [m for m in manifests if all(file_key(f.root, f.path) in have for f in m.files)]
                saved = _save(dest, fingerprint, state, applied, roots, placed, sorted(trusted_ids), resolved.seen,
                              durability, trust)
                evicted: list[str] = []
                if saved is not None:
                    usage.record(dest, {m.name: [file_key(f.root, f.path) for f in m.files] for m in applied})
                    evicted = _fit(dest, saved, options.max_bytes,
                                   {m.name for m in manifests} | {p.name for p in pins or ()}, roots, log)
        except BaseException:
            # Interrupted (Ctrl-C, SIGTERM) or failed before anything landed: this run's temp files (its live
            # tag is gone now) and its claim go too, so the dir is as this run found it and another toolchain
            # may use it. A dir where something landed keeps its claim: the next run resumes it.
            if claimed:
                with contextlib.suppress(OSError):
                    sweep_temp(dest, state_dir(dest) / "live")
                if not _holds_files(dest):
                    drop_state(dest)
            raise
        broken = sorted({m.name for m in manifests if any(b.digest in stats.missing_blobs for b in m.blobs)})
        log.missing += broken
        if stats.fatal is not None:
            raise stats.fatal
        why = _incomplete_reason(store.url, stats, budget, len(plan.fetch)) if stats.incomplete else ""
        if why and not options.best_effort:
            raise HydrateIncomplete(why)
        if broken and options.require_all:
            raise BlobsMissing(f"{store.url} lacks blobs of {len(broken)} manifests ({', '.join(broken)})",
                               url=store.url)
        work = dataclasses.replace(node_work, files_fetched=stats.files + len(from_node),
                                   bytes_fetched=stats.bytes + node_work.node_fetched_bytes,
                                   files_verified_local=stats.verified_local)
        return Outcome(manifests=[m.name for m in applied], files_total=len(have), missing=list(log.missing),
                       work=work, incomplete=why, evicted=evicted)


def _lock_wait(budget: Deadline) -> float:
    left = budget.left()
    return 600.0 if left is None else max(0.0, left)


def _claim_roots(stack: contextlib.ExitStack, dest: Path, roots: Mapping[str, Path], budget: Deadline) -> str:
    """Mark this run live in every root, then sweep what killed runs left. A root outside `dest` (a
    per-host header dir several hydrates share) is swept under its own lock, and only of temp files
    whose writer is gone: a sweep never deletes another live hydrate's in-flight file."""
    tag = new_tag()
    for root in dict.fromkeys(roots.values()):
        ensure_dir(root)
        stack.enter_context(LiveTag(state_dir(root) / "live", tag))
    for root in dict.fromkeys(roots.values()):
        live = state_dir(root) / "live"
        if root == dest:
            sweep_temp(root, live, own=tag)  # under the dest lock, held by the caller
        else:
            with FileLock(state_dir(root) / "lock", timeout=_lock_wait(budget)):
                sweep_temp(root, live, own=tag)
    return tag


def _open_and_resolve(open_store: Callable[[], Store], run: _Run, log: _Log, sets: CapturedSets) -> _Resolved:
    store = open_store()
    fingerprint = run.target.fingerprint
    # Listed before the manifests are resolved: a set published in between is hydrated, never only "seen".
    listed = _captured_names(store, fingerprint) if sets != "pinned" else []
    if sets == "skip" and listed:
        log.warnings.append(
            f"{store.url} holds {len(listed)} captured sets of this toolchain (runtime compiles serving hosts "
            "published); the config says `capture: report`, so only what builders published is hydrated "
            "(`capture: publish` takes them: docs/security.md)")
    seen = listed if sets == "take" else []
    return _Resolved(store, _resolve(store, run, log, sets == "take"), seen)


# Which captured sets a hydrate takes: "take" those extending its entries (config `capture: publish`, or no
# config), "skip" them all (`capture: report`: runtime code reaches this fleet only through the builder),
# or "pinned": exactly those a lockfile pins.
CapturedSets = Literal["take", "skip", "pinned"]


def _takes_captured(pins: list[Pin] | None) -> bool:
    """A lockfile (pins with digests) is exact: the captured sets it pinned, never newer ones."""
    return not any(p.digest for p in pins or ())


def _captured_names(store: Store, fingerprint: Fingerprint) -> list[str]:
    from ..stores.manifests import manifest_keys

    return [mk.name for mk in manifest_keys(store, fingerprint.id, captured=True)]


def _captured_since(open_store: Callable[[], Store], fingerprint: Fingerprint, state: State, sets: CapturedSets,
                    budget: Deadline) -> bool:
    """Whether the store has a captured set this dest has not seen: one listing, no manifest read. A
    store that does not answer leaves the no-op a no-op (everything wanted is in place). Only when this
    hydrate takes captured sets: otherwise the no-op opens no store."""
    if sets != "take":
        return False

    def listed() -> list[str]:
        return _captured_names(open_store(), fingerprint)

    try:
        names = budget.run(listed, "listing captured sets")
    except (StoreError, HydrateIncomplete):
        return False
    return bool(set(names) - set(state.captured_seen) - set(state.manifests))


def _incomplete_reason(url: str, stats: FetchStats, budget: Deadline, wanted: int) -> str:
    kept = f"{stats.files} files placed and kept"
    if stats.timed_out:
        return f"the deadline of {budget.seconds:g}s ran out before every blob came from {url}; {kept}"
    first = next(iter(stats.failed.values()))
    return f"{len(stats.failed)} of {wanted} blobs could not be fetched ({first}); {kept}"


def _resolve(store: Store, run: _Run, log: _Log, captured: bool) -> list[Manifest]:
    """The wanted manifests, shared ones included; the wanted entries the store lacks go to `log.missing`."""
    fingerprint, pins, trusted, budget = run.target.fingerprint, run.target.pins, run.keys, run.budget
    if pins is None:
        models = set(run.target.models) if run.target.models else None
        entries = list_entries(store, fingerprint, models, trusted, deadline=budget)
    else:
        # A GET per pin is the store's answer (no listing: a boot reads only what it wants).
        entries, _ = fetch_manifests(store, fingerprint, pins, trusted, deadline=budget)
        presence = plan_presence(fingerprint.id, [p.name for p in pins], stored={m.name for m in entries})
        log.missing = list(presence.missing)
    if not entries or (run.options.require_all and log.missing):
        what = f"lacks {len(log.missing)} of {len(pins)} wanted entries" if pins else "has no entries"
        others = other_toolchains(store, fingerprint.backend, fingerprint)
        detail = ("; published toolchains differ: " + " | ".join(others)) if others else ""
        raise NothingToHydrate(f"{store.url} {what} for {fingerprint.backend} toolchain {fingerprint.id}{detail}")
    return with_shared(store, fingerprint, entries, trusted, captured=captured, deadline=budget)


def _save(dest: Path, fingerprint: Fingerprint, old: State | None, manifests: list[Manifest],
          roots: Mapping[str, Path], placed: dict[str, PlacedFile], trusted_ids: list[str],
          captured_seen: list[str], durability: Durability = DEFAULT_DURABILITY, trust: bool = True) -> State | None:
    """Old entries that are still intact (this covers files the plan kept), plus what was just placed.
    An untrusted old state (another boot) contributes only what this run verified again. None: nothing
    was placed and nothing was claimed before, so the dest is left unclaimed."""
    if durability == "fsync" and old is not None and trust and old.files and boot_bound(old.durability):  # type: ignore[arg-type]
        durability = "both"  # the files it keeps were never fsynced: this state may speak only for this boot
    state = _stamped(State(fingerprint_id=fingerprint.id, backend=fingerprint.backend,
                           roots={k: str(v) for k, v in roots.items()}), dest, durability)
    if old is not None and not trust:
        old = State(manifests=old.manifests, signed=old.signed, captured_seen=old.captured_seen)
    if old is not None:
        state.manifests.update(old.manifests)
        state.signed.update(old.signed)
        state.files.update({k: f for k, f in old.files.items()
                            if k.partition("/")[0] in roots
                            and stat_matches(roots[k.partition("/")[0]] / k.partition("/")[2], f)})
    state.files.update(placed)
    state.manifests.update({m.name: m.digest for m in manifests})
    state.signed.update({m.name: trusted_ids for m in manifests})
    state.captured_seen = sorted(set(captured_seen) | (set(old.captured_seen) if old else set()))
    if old is None and not state.files and not state.manifests:
        drop_state(dest)   # a run that placed nothing claims nothing: the next toolchain may use the dir
        return None
    save_state(dest, state)
    return state


def _fit(dest: Path, state: State, max_bytes: int | None, wanted: set[str], roots: Mapping[str, Path],
         log: _Log) -> list[str]:
    """Evict entries this run does not want, by last use, until the dest fits `max_bytes`; what it evicted."""
    if max_bytes is None:
        return []
    ev = usage.plan(dest, state, max_bytes, keep=wanted)
    usage.apply(dest, state, ev, roots)
    if ev.short:
        log.warnings.append(f"{dest} holds {ev.held - ev.freed} bytes, over its budget of {max_bytes}: what is "
                            "left is wanted now or was used within the last hour")
    return [e.name for e in ev.evict]


def _stamped(state: State, dest: Path, durability: Durability) -> State:
    """The state as this run writes it: how it was made durable, in which boot, on which filesystem."""
    state.durability, state.boot_id, state.filesystem = durability, boot_id(), filesystem(dest)
    return state


def _from_node_cache(run: _Run, plan: HydratePlan, store: Store, roots: Iterable[Path], log: _Log) \
        -> tuple[dict[str, PlacedFile], Work]:
    """Place what the plan would fetch from the node cache (fetching into it what it lacks); the plan is
    left with only what must still come straight from the store. Fallbacks are reported, never fatal."""
    node, threads, budget, durable = run.node_cache, run.options.threads, run.budget, fsyncs(run.durability)
    if node is None or not plan.fetch:
        return {}, Work()
    from .fetch import execute

    why = node.open() or node.room_for(plan.fetch_bytes)
    if why:
        log.warnings.append(why)
        return {}, Work()

    def fetch(sub: HydratePlan, roots: list[Path], tag: str) -> tuple[dict[str, PlacedFile], int]:
        got, stats = execute(store, sub, threads, deadline=budget, tag=tag, roots=roots, durable=durable)
        if isinstance(stats.fatal, DestinationError):  # the node cache filled up or broke meanwhile
            log.warnings.append(f"node cache {node.root} failed ({stats.fatal.message}); "
                                "what it lacks is fetched straight into the dest")
        return got, stats.bytes

    placed, rest = node.serve(plan, fetch, budget)
    if durable:  # the links' new directories, durable before the state file names their files
        from .fetch import sync_new_dirs

        sync_new_dirs({os.path.dirname(p.target) for ps in plan.fetch.values() for p in ps
                       if file_key(p.record.root, p.record.path) in placed}, roots, threads)
    plan.fetch = rest.fetch
    log.warnings += node.report.warnings
    return placed, Work(node_linked=node.report.linked, node_copied=node.report.copied,
                        node_fetched_bytes=node.report.fetched_bytes)

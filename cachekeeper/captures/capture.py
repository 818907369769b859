"""Runtime-miss capture: what a serving process compiled into a hydrated dir, written back to the store.

    state file (what hydrate placed) ─▶ scan (new files, pure verdicts) ─▶ settle (stable size+mtime)
        ─▶ stage (O_NOFOLLOW copies inside the dest) ─▶ blobs ─▶ "captured" manifest ─▶ journal

A captured set is a manifest of kind "captured" for the same fingerprint, named by its file paths so
that hosts capturing the same new graph write the same name (objects are write-once: the first one wins,
the others adopt it). Capture only reads below the dest's cache root, never follows or publishes a
symlink, never publishes a file hydrate placed, and keeps what it could not publish for the next run
(`<dest>/.cachekeeper/capture.json`). It imports no torch and no database driver.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import (
    CachekeeperError,
    CaptureError,
    DestinationError,
    StoreAuthError,
    StoreWriteDenied,
    ToolchainMismatch,
)
from ..format import canonical
from ..format.fingerprint import Fingerprint
from ..format.layout import captured_set_name
from ..format.manifest import KIND_CAPTURED, Manifest
from ..fs.atomic import atomic_write_bytes
from ..fs.paths import ensure_dir, is_runtime_temp
from ..hydration.state import STATE_DIR, NotARecord, State, file_key, load_state, read_own, records_lock, state_dir
from ..publish.snapshot import LocalFile
from ..stores.base import Store

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..format.signing import SigningKey

JOURNAL = "capture.json"
JOURNAL_VERSION = 1
STAGING = "capture-staging"
CACHE_ROOT = "cache"            # capture reads this root only: the dest itself
Include = Callable[[str, str, Path], bool]


@dataclass(frozen=True)
class Seen:
    """One regular file as lstat saw it; (dev, ino) proves later that a path still names the same file."""

    path: str          # POSIX, relative to the dest
    size: int
    mtime_ns: int
    dev: int
    ino: int


@dataclass
class Scan:
    new: list[Seen] = field(default_factory=list)        # not placed by hydrate, not yet published
    refused: list[str] = field(default_factory=list)     # symlinks (never followed, never published)
    skipped: int = 0                                     # temp names, locks: what the backend leaves out
    placed: int = 0                                      # hydrate put these here
    published: int = 0                                   # a previous capture already wrote these back


@dataclass
class CaptureReport:
    dest: Path
    fingerprint_id: str
    files: list[str] = field(default_factory=list)       # complete new files (what --publish sends)
    writing: list[str] = field(default_factory=list)     # size or mtime still changing
    refused: list[str] = field(default_factory=list)
    placed: int = 0
    previously_published: int = 0
    manifest: str | None = None                          # "captured/<hash>" once published
    created: bool = False                                # False: another host published this set first
    bytes_uploaded: int = 0
    pending: int = 0                                     # kept for the next run (store unreachable)
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d["dest"] = str(self.dest)
        # In files, like hydrate's in entries: hit = placed by hydrate (prebuilt or captured earlier), missed =
        # compiled by the runtime since, captured = written back by this run (0 without --publish).
        d["counts"] = {"hit": self.placed, "missed": len(self.files) + len(self.writing),
                       "captured": len(self.files) if self.manifest else 0, "placed": self.placed,
                       "writing": len(self.writing), "refused": len(self.refused),
                       "previously_published": self.previously_published}
        return d


# --- the journal: what earlier captures published, what they could not -------------------------------


@dataclass
class Journal:
    published: dict[str, tuple[int, int]] = field(default_factory=dict)   # "cache/path" -> (size, mtime_ns)
    pending: list[str] = field(default_factory=list)
    last_error: str | None = None

    def to_json(self) -> bytes:
        return json.dumps({"v": JOURNAL_VERSION, "published": {k: list(v) for k, v in self.published.items()},
                           "pending": self.pending, "last_error": self.last_error}, sort_keys=True).encode()


def load_journal(dest: Path) -> Journal:
    """What earlier captures published; a journal that is missing, unreadable, of another version or
    malformed is empty: everything is captured again (publishing is idempotent)."""
    try:
        d = json.loads(read_own(state_dir(dest) / JOURNAL, 256 << 20))
        if not isinstance(d, dict) or d.get("v") != JOURNAL_VERSION:
            return Journal()
        published = {str(k): (_whole(v[0]), _whole(v[1])) for k, v in d["published"].items()}
        pending = d.get("pending", [])
        error = d.get("last_error")
        return Journal(published, [str(p) for p in pending] if isinstance(pending, list) else [],
                       error if isinstance(error, str) else None)
    except (OSError, NotARecord, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return Journal()


def _whole(v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError("not a whole number")
    return v


def save_journal(dest: Path, journal: Journal) -> None:
    atomic_write_bytes(state_dir(dest) / JOURNAL, journal.to_json(), durable=False)


# --- scanning (pure verdicts over lstat results) ------------------------------------------------------


def classify(rel: str, st: os.stat_result, state: State, journal: Journal, include: Include,
             path: Path) -> str:
    """"refused" | "skipped" | "placed" | "published" | "new" for one directory entry."""
    if stat.S_ISLNK(st.st_mode):
        return "refused"
    if not stat.S_ISREG(st.st_mode) or is_runtime_temp(rel.rsplit("/", 1)[-1]):
        return "skipped"
    key = file_key(CACHE_ROOT, rel)
    if key in state.files:
        return "placed"  # even if the runtime rewrote it: hydrate's bytes are the prebuilt ones
    if journal.published.get(key) == (st.st_size, st.st_mtime_ns):
        return "published"
    return "new" if include(CACHE_ROOT, rel, path) else "skipped"


def scan(dest: Path, state: State, journal: Journal, include: Include) -> Scan:
    """Walk the dest without following any symlink; the state dir is ours, not the runtime's."""
    out = Scan()
    for dirpath, dirs, files in os.walk(dest):
        here = Path(dirpath)
        dirs[:] = [d for d in dirs if d != STATE_DIR]   # cachekeeper's records, at any depth, are never the runtime's
        for d in list(dirs):
            if os.path.islink(here / d):
                dirs.remove(d)
                out.refused.append((here / d).relative_to(dest).as_posix())
        for name in files:
            full = here / name
            rel = full.relative_to(dest).as_posix()
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue  # renamed or removed since the listing
            verdict = classify(rel, st, state, journal, include, full)
            if verdict == "new":
                out.new.append(Seen(rel, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino))
            elif verdict == "refused":
                out.refused.append(rel)
            elif verdict == "placed":
                out.placed += 1
            elif verdict == "published":
                out.published += 1
            else:
                out.skipped += 1
    out.new.sort(key=lambda s: s.path)
    out.refused.sort()
    return out


def settle(dest: Path, seen: list[Seen], wait_s: float) -> tuple[list[Seen], list[str]]:
    """(complete, still being written): a file is complete when its size and mtime held for `wait_s`
    and it was not modified within that window (a writer pausing mid-file looks unchanged otherwise)."""
    if seen and wait_s > 0:
        time.sleep(wait_s)
    now_ns = time.time_ns()
    done: list[Seen] = []
    writing: list[str] = []
    for s in seen:
        try:
            st = os.lstat(dest / s.path)
        except FileNotFoundError:
            continue  # a temp that the scan saw under a final name and the runtime removed
        same = (st.st_size, st.st_mtime_ns, st.st_ino) == (s.size, s.mtime_ns, s.ino)
        if same and stat.S_ISREG(st.st_mode) and now_ns - st.st_mtime_ns >= wait_s * 1e9:
            done.append(s)
        else:
            writing.append(s.path)
    return done, writing


# --- staging: read each file once, through a descriptor that cannot follow a swapped-in symlink --------


def _stage(dest: Path, staging: Path, s: Seen) -> LocalFile:
    src = dest / s.path
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(src, flags)
    except OSError as exc:
        raise CaptureError(f"{src} changed while capturing ({exc.strerror})",
                           "the runtime is still writing; run capture again", path=str(src)) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != (s.dev, s.ino, s.size, s.mtime_ns):
            raise CaptureError(f"{src} changed while capturing", "the runtime is still writing; run capture again",
                               path=str(src))
        target = staging / s.path
        ensure_dir(target.parent)
        atomic_write_bytes(target, f.read(), durable=False)
    return LocalFile(CACHE_ROOT, s.path, target, s.size)


def captured_name(paths: Iterable[str]) -> str:
    """Named by paths, not bytes (Inductor embeds the cache path in its entries): hosts that captured the
    same new graph converge on one name, and the first complete publish wins."""
    return captured_set_name(canonical.digest(sorted(paths))[:16])


def provenance(dest: Path, state: State) -> dict[str, Any]:
    try:
        state_sha = hashlib.sha256((state_dir(dest) / "state.json").read_bytes()).hexdigest()
    except OSError:
        state_sha = ""
    return {"host": socket.gethostname(), "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "state": state_sha, "extends": sorted(state.manifests)}


# --- the whole run ------------------------------------------------------------------------------------


def never_hydrated(dest: Path) -> CaptureError:
    return CaptureError(f"{dest} was never hydrated (no {STATE_DIR}/state.json)",
                        "capture lists what the runtime added to a hydrated dir: hydrate the dir first, "
                        "then capture that same dir", path=str(dest))


def open_dest(dest: Path, fingerprint: Fingerprint) -> State:
    """The dest's state, refusing a dir hydrate never filled or one of another toolchain."""
    state = load_state(dest) if dest.is_dir() else None
    if state is None:
        raise never_hydrated(dest)
    if state.fingerprint_id != fingerprint.id:
        raise ToolchainMismatch(f"{dest} was hydrated for toolchain {state.fingerprint_id}; this host is "
                                f"{fingerprint.id}, so its runtime compiles cannot be published for that toolchain",
                                "capture on the host that serves from this dir, with the config and backend "
                                "options its hydrate used", path=str(dest), fingerprint=state.fingerprint_id)
    return state


def capture(dest: Path, fingerprint: Fingerprint, include: Include, *, open_store: Callable[[], Store] | None = None,
            settle_s: float = 2.0, lock_timeout: float = 10.0, signing_key: SigningKey | None = None,
            catalog: Callable[[], Catalog] | None = None) -> CaptureReport:
    """List (and with `open_store`, publish) the complete files the runtime added to `dest`.

    Files still being written make a publishing run raise CaptureError before anything is uploaded;
    a store that fails keeps the list in the journal (`report.pending`) and re-raises.
    """
    t0 = time.monotonic()
    dest = Path(os.path.realpath(dest))
    state = open_dest(dest, fingerprint)
    report = CaptureReport(dest=dest, fingerprint_id=fingerprint.id)
    # Under hydrate's lock: a hydrate in progress places files before its state names them.
    with records_lock(dest, timeout=lock_timeout):
        state = open_dest(dest, fingerprint)
        journal = load_journal(dest)
        found = scan(dest, state, journal, include)
    report.refused, report.placed, report.previously_published = found.refused, found.placed, found.published
    complete, report.writing = settle(dest, found.new, settle_s if found.new else 0)
    report.files = [s.path for s in complete]
    if open_store is None:
        report.seconds = time.monotonic() - t0
        return report
    if report.writing:
        raise CaptureError(f"{len(report.writing)} files under {dest} are still being written "
                           f"(e.g. {report.writing[0]}); nothing was published",
                           "run capture again once the server finished compiling (or keep capture watching)",
                           path=str(dest))
    if complete:
        with records_lock(dest, "capture.lock", timeout=lock_timeout):
            _publish(dest, fingerprint, state, complete, open_store, signing_key, catalog, report)
    report.seconds = time.monotonic() - t0
    return report


def _publish(dest: Path, fingerprint: Fingerprint, state: State, complete: list[Seen],
             open_store: Callable[[], Store], signing_key: SigningKey | None,
             catalog: Callable[[], Catalog] | None, report: CaptureReport) -> None:
    from ..publish.upload import (  # the publisher's own steps: blobs, then signature + manifest
        commit_manifest,
        upload_files,
    )

    journal = load_journal(dest)
    staging = state_dir(dest) / STAGING
    store_url = "the store"
    permission = Store.write_permission  # until the store is open and can say it in its own terms
    try:
        local = [_stage(dest, staging, s) for s in complete]
        store = open_store()
        permission = store.write_permission
        store_url = store.url
        files, blobs, uploaded, _ = upload_files(store, local)
        # A hydrate that ran meanwhile may have placed some of these paths: never republish its files.
        placed_now = set((load_state(dest) or state).files)
        files = [f for f in files if file_key(f.root, f.path) not in placed_now]
        if not files:
            return
        used = {f.blob for f in files}
        manifest = Manifest(KIND_CAPTURED, captured_name(f.path for f in files), fingerprint, tuple(files),
                            tuple(b for b in blobs if b.digest in used), provenance=provenance(dest, state))
        manifest.validate()
        manifest, report.created = commit_manifest(store, manifest, signing_key)
    except (StoreAuthError, PermissionError, DestinationError) as exc:
        _keep(dest, journal, complete, str(exc))
        report.pending = len(complete)
        if isinstance(exc, DestinationError) and store_url == "the store":
            raise  # staging inside the dest failed: a local problem, not the store's
        raise StoreWriteDenied(f"{store_url} refused a write: {exc}", permission,
                               url=store_url) from None
    except CachekeeperError as exc:
        _keep(dest, journal, complete, str(exc))
        report.pending = len(complete)
        raise
    finally:
        _remove_tree(staging)
    report.manifest, report.bytes_uploaded = manifest.name, uploaded
    sizes = {s.path: (s.size, s.mtime_ns) for s in complete}
    journal.published.update({file_key(CACHE_ROOT, p): sizes[p] for p in sizes})
    journal.pending, journal.last_error = [], None
    save_journal(dest, journal)
    if catalog is not None:
        _record(catalog, manifest, store_url, report)


def _record(catalog: Callable[[], Catalog], manifest: Manifest, store_url: str, report: CaptureReport) -> None:
    # The store is the source of truth and already holds the set: an index that lags is a warning.
    try:
        with catalog() as cat:
            cat.record(manifest, store_url=store_url)
    except CachekeeperError as exc:
        report.error = f"catalog not updated ({exc.message}); `cachekeeper catalog rebuild` catches up"


def _keep(dest: Path, journal: Journal, complete: list[Seen], error: str) -> None:
    journal.pending = sorted({*journal.pending, *(s.path for s in complete)})
    journal.last_error = error
    with contextlib.suppress(CachekeeperError, OSError):
        save_journal(dest, journal)


def _remove_tree(root: Path) -> None:
    if not root.exists():
        return
    for dirpath, dirs, files in os.walk(root, topdown=False):
        for name in files:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(dirpath, name))
        for name in dirs:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(dirpath, name))
    with contextlib.suppress(OSError):
        os.rmdir(root)


__all__ = ["CaptureReport", "capture", "captured_name", "scan", "settle"]

"""Execute a hydrate plan: stream every blob into place, verify every byte, temp-then-rename.

Memory does not grow with the cache: each worker holds at most one read chunk (`READ_CHUNK`), and a
pack streams straight into its member files (each verified by its own sha256 before its rename), so
bytes in flight are at most `threads * READ_CHUNK` whatever the pack, blob or cache size.

Every read runs under the hydrate's deadline and resumes from the last byte received after a reset or a
stall (`stores/reader.py`). When the deadline runs out or the store fails, what was placed so far is
returned (each file is complete and verified), so the caller records it and a rerun fetches the rest.
Durability is bounded to our own files: with `durable`, each is fsynced before its rename and its
directory after it, on committer threads while the streams go on (hydration/commit.py); the directories
created are fsynced (through their parents) at the end, before the state file says the files are there
(no global sync; docs/durability.md). Without it the state file is boot-bound instead (durability.py).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import mmap
import os
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from .. import settings
from ..errors import (
    CachekeeperError,
    DestinationError,
    HydrateIncomplete,
    IntegrityError,
    ObjectNotFound,
    StoreError,
)
from ..format import relocate
from ..format.layout import blob_key
from ..fs.atomic import AtomicFile, fsync_dir
from ..fs.paths import ensure_dir, sha256_file
from ..stores.base import Store
from ..stores.reader import Deadline, read_into
from .commit import Committer
from .plan import HydratePlan, Placement, coalesce
from .state import PlacedFile

FETCH_THREADS = 16
# A blob this big is fetched as parallel ranged GETs of PART bytes (one stream is the known ceiling
# on real object stores); CACHEKEEPER_PART_MIB=0 turns it off.
_PART_MIB = settings.PART_MIB.get()
PART = int((32 if _PART_MIB is None else _PART_MIB) * (1 << 20))
HASH_WINDOW = 8 << 20   # bytes of a part's read-back mapped at once (hydration/fetch._Parts._hash_back)
GRACE = 1.0   # seconds past the deadline we wait for workers whose reads are timed by it anyway
STOP_WAIT = 5.0   # seconds an interrupted hydrate waits for its workers to stop (each at its next chunk)
T = TypeVar("T")


@dataclass
class FetchStats:
    files: int = 0
    bytes: int = 0
    verified_local: int = 0
    missing_blobs: set[str] = field(default_factory=set)   # named by a manifest, gone from the store
    retries: int = 0
    failed: dict[str, str] = field(default_factory=dict)   # blob digest -> why the store could not serve it
    fatal: CachekeeperError | None = None                  # corrupt bytes or an unwritable destination
    timed_out: bool = False
    bytes_received: int = 0                                # progress, including files not yet finished
    files_planned: int = 0
    bytes_planned: int = 0

    @property
    def incomplete(self) -> bool:
        return self.timed_out or bool(self.failed)


class _FetchContext:
    """What the workers of one execute() share: the store, the budget, and what they placed."""

    def __init__(self, store: Store, deadline: Deadline, tag: str | None, durable: bool = True) -> None:
        self.store = store
        self.durable = durable
        self.deadline = deadline
        self.tag = tag
        self.lock = threading.Lock()
        self.placed: dict[str, PlacedFile] = {}
        self.stats = FetchStats()
        self.dirs: set[str] = set()      # parents of the files placed (they got a new entry)
        self.unsynced: set[str] = set()  # ... of which not fsynced after that file's rename
        self.committer = Committer(self.place, durable=durable)

    def place(self, p: Placement, st: os.stat_result, fetched: bool = True, parent_synced: bool = False) -> None:
        with self.lock:
            self.placed[f"{p.record.root}/{p.record.path}"] = PlacedFile(p.record.sha256, st.st_size, st.st_mtime_ns)
            if fetched:
                self.stats.files += 1
                self.stats.bytes += p.record.size
                parent = os.path.dirname(p.target)
                self.dirs.add(parent)
                if not parent_synced:
                    self.unsynced.add(parent)
            else:
                self.stats.verified_local += 1

    def open(self, p: Placement) -> AtomicFile:
        ensure_dir(p.target.parent)
        return AtomicFile(p.target, self.tag, writeback=self.durable)

    def read(self, digest: str, sink: Callable[[bytes], None], start: int, length: int, total: int) -> None:
        def counted(chunk: bytes) -> None:
            self.stats.bytes_received += len(chunk)  # progress only: an unlocked counter is close enough
            sink(chunk)

        read_into(self.store, blob_key(digest), counted, start=start, length=length, total=total,
                  deadline=self.deadline)


def _verified_commit(run: _FetchContext, p: Placement, out: AtomicFile, actual: str, what: str, *,
                     wait: bool = False) -> None:
    """Refuse wrong bytes at once; hand right ones to the committers (fsync, rename, record), so this
    worker goes back to its stream. `wait`: placed before returning (its copies read it back)."""
    if p.record.relocate:
        # Issue 39 hook (format/relocate.py `commit`): a relocatable file's verified bytes are rewritten in
        # this temp file for the dir it lands in; its record then carries the placed bytes' sha256, which
        # the state records. None: wrong bytes (refused below).
        placed = relocate.commit(p.record, p.target, out, actual)
        p, actual = (p, "") if placed is None else (Placement(placed, p.target), placed.sha256)
    if actual != p.record.sha256:
        out.abort()
        raise IntegrityError(f"{what} for {p.record.path} failed verification")
    if wait:
        run.place(p, out.commit(fsync=run.durable))
    else:
        run.committer.submit(p, out)


def _copy_placed(run: _FetchContext, src: Placement, p: Placement) -> None:
    """The same bytes at another path (identical files share a blob): copied locally, re-verified."""
    out = run.open(p)
    h = hashlib.sha256()
    try:
        with open(src.target, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
    except OSError as exc:
        out.abort()
        raise DestinationError(f"cannot read back {src.target}: {exc.strerror}") from None
    _verified_commit(run, p, out, h.hexdigest(), "copy")


def _fetch_single(run: _FetchContext, digest: str, size: int, members: list[Placement]) -> None:
    first, *rest = members
    out = run.open(first)
    h = hashlib.sha256()

    def sink(chunk: bytes) -> None:
        h.update(chunk)
        out.write(chunk)

    try:
        if size:
            run.read(digest, sink, 0, size, size)
    except BaseException:
        out.abort()
        raise
    _verified_commit(run, first, out, h.hexdigest(), f"blob {digest[:12]}…", wait=bool(rest))
    for p in rest:
        _copy_placed(run, first, p)


class _Parts:
    """One large blob fetched as parallel ranged GETs into one temp file (each part written at its
    offset), renamed into place only if its sha256 matches; any failed part discards the file.

    The hash runs along with the download, not after it: whichever worker ends a part hashes every
    part that is now contiguous from the front (read back from the page cache), one hasher at a time.
    Only what the last part adds is left to hash at the end, instead of the whole blob."""

    def __init__(self, run: _FetchContext, digest: str, size: int, members: list[Placement], part: int) -> None:
        self.run, self.digest, self.size, self.members = run, digest, size, members
        self.ranges = [(off, min(part, size - off)) for off in range(0, size, part)]
        self.out: AtomicFile | None = None
        self.lock = threading.Lock()
        self.ended = 0
        self.error: BaseException | None = None
        self.done: set[int] = set()   # parts fully written
        self.hashed = 0               # parts [0, hashed) are in `self.hash`
        self.hashing = False          # a worker is hashing now: others leave their part to it
        self.hash = hashlib.sha256()

    def _open(self) -> AtomicFile:
        with self.lock:
            if self.out is None:
                self.out = self.run.open(self.members[0])
            return self.out

    def fetch(self, index: int) -> None:
        start, length = self.ranges[index]
        try:
            part = self._open().stream(start)   # this part's slice, its writeback started by its own progress
            self.run.read(self.digest, part.write, start, length, self.size)
            self._advance(index)
        except BaseException as exc:
            with self.lock:
                self.error = self.error or exc
        with self.lock:  # every worker has left _advance before the last one gets here
            self.ended += 1
            last = self.ended == len(self.ranges)
        if last:
            self._finish()
        elif self.error is not None:
            raise self.error

    def _advance(self, index: int) -> None:
        """Mark part `index` written; then, unless another worker is at it, hash the parts now
        contiguous from the front. The check for more work and giving up the hasher's role happen
        under one lock hold, so a part that ends meanwhile is either seen here or hashes itself."""
        with self.lock:
            self.done.add(index)
            if self.hashing:
                return
            self.hashing = True
        assert self.out is not None
        try:
            with open(self.out.tmp, "rb", buffering=0) as f:
                while True:
                    with self.lock:
                        if self.error is not None or self.hashed not in self.done:
                            self.hashing = False
                            return
                        start, length = self.ranges[self.hashed]
                    self._hash_back(f.fileno(), start, length)
                    with self.lock:
                        self.hashed += 1
        except (OSError, ValueError) as exc:
            with self.lock:
                self.hashing = False
            raise DestinationError(f"cannot read back {self.out.tmp}: {getattr(exc, 'strerror', None) or exc}") \
                from None
        except BaseException:
            with self.lock:
                self.hashing = False
            raise

    def _hash_back(self, fd: int, start: int, length: int) -> None:
        """Hash part [start, start + length) of our own temp file, read back through mappings: sha256
        reads the page cache in place, where read(2) into a buffer first copies it (measured: ~20% of a
        read-back's CPU). One window of HASH_WINDOW at a time, so the mapped pages a hasher holds (which
        count in its RSS) stay that small whatever the part size. The file is ours, named by this run's
        tag and fully written up to here; one truncated under us by another process would end this
        process (SIGBUS), not pass as verified."""
        if os.fstat(fd).st_size < start + length:
            raise IntegrityError(f"blob {self.digest[:12]}… is shorter on disk than written")
        end = start + length
        pos = start
        while pos < end:
            base = pos - pos % mmap.ALLOCATIONGRANULARITY   # a mapping starts on a page; a part need not
            n = min(HASH_WINDOW - (pos - base), end - pos)
            with mmap.mmap(fd, pos - base + n, offset=base, access=mmap.ACCESS_READ) as m:
                view = memoryview(m)
                try:
                    self.hash.update(view[pos - base:])   # GIL-free: the other workers go on meanwhile
                finally:
                    view.release()   # a live export would make closing the mapping fail
            pos += n

    def _finish(self) -> None:
        out = self.out
        if self.error is not None or out is None or self.hashed < len(self.ranges):
            if out is not None:
                out.abort()
            raise self.error or IntegrityError(f"blob {self.digest[:12]}… was not written")
        first, *rest = self.members
        _verified_commit(self.run, first, out, self.hash.hexdigest(), f"blob {self.digest[:12]}…",
                         wait=bool(rest))
        for p in rest:
            _copy_placed(self.run, first, p)


class _PackSink:
    """Consumes a pack's bytes from `pos` on and splits them into member files as they stream by:
    gaps are dropped, each member is verified and renamed the moment its last byte arrives."""

    def __init__(self, run: _FetchContext, pos: int, members: list[Placement]) -> None:
        self.run = run
        self.pos = pos
        self.members = members   # sorted by offset, not overlapping
        self.i = 0
        self.out: AtomicFile | None = None
        self.hash = hashlib.sha256()

    def _finish(self, p: Placement) -> None:
        out = self.out or self.run.open(p)
        self.out = None
        _verified_commit(self.run, p, out, self.hash.hexdigest(), "pack slice")
        self.hash = hashlib.sha256()
        self.i += 1

    def _finish_empty(self) -> None:
        while self.i < len(self.members) and self.members[self.i].record.size == 0 \
                and self.members[self.i].record.offset <= self.pos:
            self._finish(self.members[self.i])

    def write(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        self._finish_empty()
        while view and self.i < len(self.members):
            p = self.members[self.i]
            off, end = p.record.offset, p.record.offset + p.record.size
            if self.pos < off:  # a gap (a member we do not need): drop it
                n = min(off - self.pos, len(view))
            else:
                if self.out is None:
                    self.out = self.run.open(p)
                n = min(end - self.pos, len(view))
                piece = view[:n]
                self.hash.update(piece)
                self.out.write(piece)
            view = view[n:]
            self.pos += n
            if self.pos == end and self.pos >= off:
                self._finish(p)
                self._finish_empty()

    def close(self) -> None:
        self._finish_empty()

    def abort(self) -> None:
        if self.out is not None:
            self.out.abort()
            self.out = None


def _layers(members: list[Placement]) -> Iterator[list[Placement]]:
    """Members split into runs whose slices do not overlap (two records naming one slice take two
    passes), each sorted by offset, so every pass streams the pack forward once."""
    todo = sorted(members, key=lambda p: (p.record.offset, p.record.size))
    while todo:
        layer: list[Placement] = []
        later: list[Placement] = []
        end = -1
        for p in todo:
            if p.record.offset >= end:
                layer.append(p)
                end = p.record.offset + p.record.size
            else:
                later.append(p)
        yield layer
        todo = later


def _fetch_pack(run: _FetchContext, digest: str, size: int, members: list[Placement]) -> None:
    for layer in _layers(members):
        for start, length, group in coalesce(layer):
            sink = _PackSink(run, start, group)
            try:
                if length:
                    run.read(digest, sink.write, start, length, size)
                sink.close()
                if sink.i < len(group):
                    raise IntegrityError(f"pack {digest[:12]}… ended before {group[sink.i].record.path}")
            finally:
                sink.abort()


def _check_local(run: _FetchContext, p: Placement) -> bool:
    """A present file of unknown origin: adopted if its bytes are right (then it is not fetched)."""
    try:
        if p.record.relocate:
            # Issue 39 hook (format/relocate.py `local_record`): right when it is the published bytes rewritten
            # for this dir; adopted with the sha256 it has on disk.
            local = relocate.local_record(p.record, p.target)
            ok, p = local is not None, Placement(local or p.record, p.target)
        else:
            ok = sha256_file(p.target) == p.record.sha256
        st = os.lstat(p.target)
    except OSError:
        return False
    if ok:
        run.place(p, st, fetched=False)
    return ok


def _pool(fn: Callable[[T], object], items: Iterable[T], threads: int, deadline: Deadline,
          tick: Callable[[], None] | None = None) -> Generator[tuple[T, object, BaseException | None], None, None]:
    """Run `fn` over `items` on daemon threads; yield (item, result, error) as each finishes. Stops
    waiting once the deadline (plus a grace for reads it already bounds) is gone: a stuck worker can
    never hold the boot, and it stops at its next chunk (`deadline.cancelled`)."""
    todo: queue.SimpleQueue[T] = queue.SimpleQueue()
    items = list(items)
    for it in items:
        todo.put(it)
    done: queue.SimpleQueue[tuple[T, object, BaseException | None]] = queue.SimpleQueue()

    stopped = threading.Semaphore(0)   # released by each worker as it ends

    def worker() -> None:
        try:
            while not deadline.cancelled.is_set():
                try:
                    it = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    done.put((it, fn(it), None))
                except BaseException as exc:  # handed to the caller's thread
                    done.put((it, None, exc))
        finally:
            stopped.release()

    launched = 0
    try:
        for _ in range(min(threads, len(items))):
            launched += 1
            threading.Thread(target=worker, name="ck-fetch", daemon=True).start()
        for _ in range(len(items)):
            while True:
                left = deadline.left()
                wait = 0.25 if left is None else max(0.0, min(0.25, left + GRACE))
                try:
                    yield done.get(timeout=wait)
                    break
                except queue.Empty:
                    if tick is not None:
                        tick()
                    left = deadline.left()
                    if left is not None and left + GRACE <= 0:
                        deadline.cancelled.set()
                        raise HydrateIncomplete(f"the deadline of {deadline.seconds:g}s ran out") from None
    except HydrateIncomplete:
        raise   # the deadline: a stuck worker is left behind, never waited for
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM) or closed early by an error: the workers stop at their next item or
        # chunk and are waited for (boundedly), so none opens a temp file after the caller swept them.
        deadline.cancelled.set()
        stop_by = time.monotonic() + STOP_WAIT
        for _ in range(launched):
            if not stopped.acquire(timeout=max(0.0, stop_by - time.monotonic())):
                break
        raise


def execute(store: Store, plan: HydratePlan, threads: int = FETCH_THREADS, *, deadline: Deadline | None = None,
            tag: str | None = None, progress: Callable[[FetchStats], None] | None = None,
            roots: Iterable[Path] = (), durable: bool = True) -> tuple[dict[str, PlacedFile], FetchStats]:
    """Returns what was placed ("root/path" -> PlacedFile) and counters. Never raises for a deadline or
    a store failure: those end in `stats.timed_out` / `stats.failed` with everything placed so far.
    `durable`: fsync every file and directory entry before returning (durability "fsync" / "both")."""
    run = _FetchContext(store, deadline or Deadline(), tag, durable)
    stats = run.stats
    tick = (lambda: progress(stats)) if progress is not None else None
    placed, dirs = _execute(run, plan, threads, tick, roots)  # the CLI pauses the collector (cli/boot.py)
    if durable:
        _sync_dirs(dirs, threads)
    return placed, stats


def _execute(run: _FetchContext, plan: HydratePlan, threads: int, tick: Callable[[], None] | None,
             roots: Iterable[Path]) -> tuple[dict[str, PlacedFile], set[str]]:
    """What `execute` returns, and the directories whose new entries are not yet durable."""
    stats = run.stats
    try:
        # Present-but-unknown files: keep them if their bytes are right, else fetch them too.
        with contextlib.closing(_pool(lambda p: _check_local(run, p), plan.check, threads, run.deadline, tick)) \
                as checked:
            for p, ok, exc in checked:
                if exc is not None:
                    raise exc
                if not ok:
                    plan.fetch.setdefault(p.record.blob, []).append(p)
        jobs = sorted(plan.fetch.items(), key=lambda kv: -plan.blob_sizes[kv[0]])  # big ones first
        stats.files_planned = sum(len(ps) for ps in plan.fetch.values())
        stats.bytes_planned = plan.fetch_bytes

        tasks: list[tuple[str, Callable[[], None]]] = []
        for digest, members in jobs:
            size = plan.blob_sizes[digest]
            if not plan.blob_packed[digest] and PART and size >= 2 * PART:
                parts = _Parts(run, digest, size, members, PART)
                tasks += [(digest, functools.partial(parts.fetch, i)) for i in range(len(parts.ranges))]
            else:
                fn = _fetch_pack if plan.blob_packed[digest] else _fetch_single
                tasks.append((digest, functools.partial(fn, run, digest, size, members)))

        with contextlib.closing(_pool(lambda task: task[1](), tasks, threads, run.deadline, tick)) as fetched:
            for (digest, _), _, exc in fetched:
                if exc is not None:
                    _record_failure(stats, digest, exc)
                if tick is not None:
                    tick()
    except HydrateIncomplete:
        stats.timed_out = True
    except BaseException:
        run.committer.drain(STOP_WAIT)   # what was verified is renamed now, never after the caller looked
        raise
    left = run.deadline.left()
    run.committer.drain(None if left is None else max(0.0, left) + GRACE)
    if isinstance(run.committer.error, CachekeeperError):  # an unwritable destination
        stats.fatal = stats.fatal or run.committer.error
    elif run.committer.error is not None:
        raise run.committer.error  # a bug: keep its traceback
    stats.retries = run.deadline.retries.retries
    with run.lock:  # workers abandoned at the deadline may still place a file: take a snapshot
        return dict(run.placed), _dirs_to_sync(run.dirs, run.unsynced, {str(r) for r in roots})


def _record_failure(stats: FetchStats, digest: str, exc: BaseException) -> None:
    if isinstance(exc, ObjectNotFound):
        # Like a remote build cache: a manifest whose bytes are gone is a miss, not a failure.
        stats.missing_blobs.add(digest)
    elif isinstance(exc, HydrateIncomplete):
        stats.timed_out = True
    elif isinstance(exc, StoreError):
        stats.failed[digest] = exc.message
    elif isinstance(exc, CachekeeperError):
        stats.fatal = stats.fatal or exc
    else:
        raise exc  # a bug: keep its traceback


def _dirs_to_sync(dirs: set[str], unsynced: set[str], roots: set[str]) -> set[str]:
    """The directories still to fsync before the state file: those a file was renamed into without a
    directory fsync after it (`unsynced`), and every ancestor of a directory that got a file, up to
    its root (a directory created this run is a new entry of its parent). Plain strings: pathlib's
    parent and hash cost more than the fsyncs' own CPU here."""
    todo = set(unsynced)
    above: set[str] = set()
    for d in dirs:
        while d not in roots:
            up = os.path.dirname(d)
            if up == d or up in above:
                break
            above.add(up)
            d = up
    return todo | above


def sync_new_dirs(dirs: set[str], roots: Iterable[Path], threads: int = FETCH_THREADS) -> None:
    """fsync directories that got files placed some other way (the node cache's links) and every
    ancestor up to its root: the same promise as a fetched file's."""
    _sync_dirs(_dirs_to_sync(dirs, set(dirs), {str(r) for r in roots}), threads)


def _sync_dirs(todo: set[str], threads: int) -> None:
    """fsync `todo`, several at once (the block layer merges flushes in flight together)."""
    if len(todo) <= 4:
        for d in todo:
            fsync_dir(d)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(threads, 16)) as pool:
        list(pool.map(fsync_dir, todo))

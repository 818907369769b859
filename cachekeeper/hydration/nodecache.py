"""The node cache: verified file contents kept once per node, content-addressed, shared by every dest.

    <node>/NODE-CACHE                  {"v": 1}: the layout version (another version is refused, not mixed)
    <node>/objects/<ab>/<sha256>       the bytes, mode 0444, named by their sha256
    <node>/objects/<ab>/<sha256>.ok    "size mtime_ns boot": the object was verified when it had this size
                                       and mtime (in that boot, when not fsynced); its own mtime = last use
    <node>/locks/<blob digest>         one flock per store blob: hydrates fetching the same blob wait on
                                       each other for that blob only, never on the whole cache
    <node>/.cachekeeper/live/<tag>     LiveTag of each run writing here (its temp files are not swept)

Many hydrates on one node fetch each blob from the store once: each first links what is already here,
then takes the locks of the blobs still missing that nobody holds (non-blocking) and fetches those into
the node cache, then waits on the locks others hold and links what they fetched (or fetches it itself,
when their holder died: the kernel released its flock). A dest's file is a reflink (copy-on-write) where
the filesystem can, else a hardlink of the read-only object when hydrate may rely on mode bits (not
root), else a copy; across filesystems it is a copy (reported). docs/durability.md says why.

An object is trusted when its size and mtime match its `.ok` record (written after its sha256 was
verified); otherwise it is hashed again, and discarded (reported) if its bytes changed. gc evicts by
last use and never an object a dest links (st_nlink > 1).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..config.hydrate import LinkMode
from ..errors import DestinationError, LockBusy
from ..format import relocate
from ..format.manifest import FileRecord
from ..fs.atomic import fsync_dir
from ..fs.durability import NETWORK_FS, boot_id, fs_type
from ..fs.locks import FileLock, LiveTag, sweep_temp
from ..fs.paths import ensure_dir, new_tag, sha256_file, temp_path
from ..stores.reader import Deadline
from .plan import HydratePlan, Placement
from .state import NotARecord, PlacedFile, file_key, read_own

NODE_VERSION = 1
MARKER = "NODE-CACHE"
# execute(plan with node-cache targets, roots, tag) -> ("root/path" -> PlacedFile, bytes read from the store)
Fetch = Callable[[HydratePlan, list[Path], str], tuple[dict[str, PlacedFile], int]]


@dataclass
class NodeReport:
    linked: int = 0            # dest files that share the node cache's object (hardlink or reflink)
    copied: int = 0            # dest files copied from it (another filesystem, or root without reflink)
    fetched_bytes: int = 0     # bytes this run read from the store into the node cache
    mode: str = ""             # how dests were filled: reflink, hardlink or copy
    warnings: list[str] = field(default_factory=list)


@dataclass
class NodeCache:
    root: Path
    link: LinkMode = "auto"
    durable: bool = False
    verify: bool = False
    max_bytes: int | None = None
    report: NodeReport = field(default_factory=NodeReport)
    _mode: str = ""
    _dirs: set[str] = field(default_factory=set)   # dest directories known to exist (one mkdir each)

    @property
    def objects(self) -> Path:
        return self.root / "objects"

    def object_path(self, sha: str) -> Path:
        return Path(self._obj(sha))

    def _obj(self, sha: str) -> str:
        # Plain strings on the per-file path: pathlib's joins were a third of a 2,000-file link's CPU.
        return f"{os.fspath(self.root)}/objects/{sha[:2]}/{sha}"

    # --- opening ---------------------------------------------------------------------------------------

    def open(self) -> str | None:
        """Check the node cache can be used; None, or why not (a warning: the hydrate goes on without
        it). A network filesystem is an error: nodes sharing one would not lock each other reliably."""
        kind = fs_type(self.root if self.root.exists() else self.root.parent)
        if kind in NETWORK_FS:
            raise DestinationError(
                f"node cache {self.root} is on {kind}, a network filesystem; a node cache is per node "
                "(several nodes sharing one would not lock each other reliably)",
                "put the node cache on a local disk of each node (a hostPath), not on a shared mount")
        try:
            ensure_dir(self.objects)
            ensure_dir(self.root / "locks")
            marker = self.root / MARKER
            if not marker.exists():
                with contextlib.suppress(FileExistsError):
                    _write_exclusive(marker, json.dumps({"v": NODE_VERSION}).encode())
            doc = json.loads(read_own(marker, 1 << 16))
            version = doc.get("v") if isinstance(doc, dict) else None
        except DestinationError as exc:
            return f"node cache {self.root} is not usable ({exc.message}); hydrating without it"
        except (OSError, NotARecord, ValueError, RecursionError) as exc:
            return f"node cache {self.root} is not usable ({getattr(exc, 'strerror', None) or exc}); " \
                   "hydrating without it"
        if version != NODE_VERSION or isinstance(version, bool):
            # Another release's (or a damaged) node cache: never guessed at, and never a reason not to boot.
            return (f"node cache {self.root} has layout version {str(version)[:20]}; this cachekeeper reads version "
                    f"{NODE_VERSION}, so it hydrates without it (give each version its own node cache directory)")
        if not os.access(self.root / "locks", os.W_OK) or not os.access(self.objects, os.W_OK):
            return f"node cache {self.root} is read-only; hydrating without it"
        return None

    def room_for(self, need: int) -> str | None:
        """Evict by last use to fit `need` more bytes (the budget and the disk); why it cannot, or None."""
        if self.max_bytes is not None:
            over = self.size() + need - self.max_bytes
            if over > 0 and self.evict(over) < over:
                return f"node cache {self.root} cannot fit {need} bytes within its budget of {self.max_bytes} " \
                       "(the rest is linked into dests); hydrating without it"
        st = os.statvfs(self.objects)
        free = st.f_bavail * st.f_frsize
        if free < need + (16 << 20) and self.evict(need + (16 << 20) - free) < need + (16 << 20) - free:
            return f"node cache {self.root} is full ({free >> 20} MiB free, {need >> 20} MiB needed); " \
                   "hydrating without it"
        return None

    # --- objects ---------------------------------------------------------------------------------------

    def trusted(self, sha: str) -> bool:
        """The object is present and its bytes are the verified ones (hashed again when its size or
        mtime changed since, or after a reboot when it was not fsynced; discarded if wrong)."""
        path = self._obj(sha)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode):
            self._discard(sha)
            return False
        ok = self._record(sha)
        if ok is not None and not self.verify and ok[:2] == (st.st_size, st.st_mtime_ns) \
                and ok[2] in ("-", boot_id()):
            return True
        try:
            right = sha256_file(Path(path)) == sha
        except OSError:
            return False
        if not right:
            self.report.warnings.append(f"node cache object {sha[:12]}… was changed behind our back; "
                                        "discarded and fetched again")
            self._discard(sha)
            return False
        self._mark(sha, os.lstat(path))
        return True

    def _record(self, sha: str) -> tuple[int, int, str] | None:
        """(size, mtime_ns, boot) the object had when verified ("-": it was fsynced, any boot)."""
        try:
            size, mtime, boot = read_own(Path(self._obj(sha) + ".ok"), 256).decode("ascii").split()
            return int(size), int(mtime), boot
        except (OSError, NotARecord, ValueError):
            return None   # then the object is hashed again

    def _mark(self, sha: str, st: os.stat_result) -> None:
        boot = "-" if self.durable else (boot_id() or "?")
        ok = self.object_path(sha).with_suffix(".ok")
        tmp = temp_path(ok)
        tmp.write_text(f"{st.st_size} {st.st_mtime_ns} {boot}\n")
        os.replace(tmp, ok)

    def _discard(self, sha: str) -> None:
        for p in (self._obj(sha) + ".ok", self._obj(sha)):
            with contextlib.suppress(OSError):
                os.unlink(p)

    def touch(self, sha: str) -> None:
        """Record a use (the `.ok` file's mtime): gc evicts the least recently used first."""
        with contextlib.suppress(OSError):
            os.utime(self._obj(sha) + ".ok")

    # --- placing into a dest ---------------------------------------------------------------------------

    def place(self, sha: str, target: Path) -> os.stat_result | None:
        """`target` filled from the object (atomically replacing what is there); None if the object is
        gone (evicted meanwhile: the caller fetches it)."""
        src = self._obj(sha)
        parent = os.path.dirname(target)
        if parent not in self._dirs:
            ensure_dir(parent)
            self._dirs.add(parent)
        mode = self._how(target)
        # Straight to the name when nothing is there (link(2) never replaces); else beside it, then renamed
        # over it (a wrong file or a symlink there is replaced atomically, never followed).
        tmp = target if mode == "hardlink" else temp_path(target)
        try:
            try:
                if mode == "hardlink":
                    try:
                        os.link(src, tmp)
                    except FileExistsError:   # something is there: link beside it, rename over it
                        tmp = temp_path(target)
                        os.link(src, tmp)
                else:
                    self._clone_or_copy(src, tmp, mode)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    return None
                if exc.errno != errno.EXDEV:
                    raise
                self._cross_device(target)
                tmp = temp_path(target)   # a copy is never written under the real name
                self._clone_or_copy(src, tmp, "copy")
                mode = self._mode = "copy"
            if tmp != target:
                os.replace(tmp, target)
            if self.durable:
                fsync_dir(parent)
            st = os.lstat(target)
        except OSError as exc:
            if tmp != target:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            raise DestinationError(f"cannot place {target} from node cache {self.root}: {exc.strerror}") from None
        self.touch(sha)
        if mode == "copy":
            self.report.copied += 1
        else:
            self.report.linked += 1
        return st

    def _how(self, target: Path) -> str:
        if self._mode:
            return self._mode
        mode: str = self.link
        if mode == "auto":
            # copy-on-write where the filesystem has it; a read-only hardlink only when mode bits bind the
            # writer (root ignores them: a server running as root could write into every dest at once)
            mode = "reflink" if _can_reflink(self.objects, target.parent) else (
                "hardlink" if os.geteuid() != 0 else "copy")
            if mode == "copy":
                self.report.warnings.append(
                    f"node cache {self.root}: files are copied into the dest (no reflink on this filesystem, "
                    "and hydrate runs as root, which can write through a read-only hardlink); the store is "
                    "still read once per node")
        self._mode = mode
        self.report.mode = mode
        return mode

    def _cross_device(self, target: Path) -> None:
        if not any("another filesystem" in w for w in self.report.warnings):
            self.report.warnings.append(f"node cache {self.root} is on another filesystem than {target.parent}; "
                                        "files are copied from it (the store is still read once per node)")
        self.report.mode = "copy"

    def _clone_or_copy(self, src: str | Path, dst: Path, mode: str) -> None:
        with open(src, "rb") as fin, open(dst, "xb") as fout:
            if mode == "reflink":
                import fcntl

                fcntl.ioctl(fout.fileno(), _FICLONE, fin.fileno())
            else:
                import shutil  # not at import: it pulls in bz2 and lzma, off the no-op path

                shutil.copyfileobj(fin, fout, 1 << 20)
            if self.durable:
                fout.flush()
                os.fsync(fout.fileno())
        os.chmod(dst, 0o644)  # the dest's own copy: the server may do what it likes with it

    # --- filling from the store ------------------------------------------------------------------------

    def serve(self, plan: HydratePlan, fetch: Fetch, deadline: Deadline) -> tuple[dict[str, PlacedFile],
                                                                                     HydratePlan]:
        """Place every file of `plan.fetch` from the node cache, fetching the missing contents into it
        first (each blob by one hydrate on the node). Returns what was placed, and the plan of what is
        left to fetch straight into the dest (contents that vanished meanwhile)."""
        placed: dict[str, PlacedFile] = {}
        left = self._link_present(plan.fetch, placed)
        if left:
            tag = new_tag()
            live = self.root / ".cachekeeper" / "live"
            with LiveTag(live, tag):
                sweep_temp(self.objects, live, own=tag)  # only temp files whose writer is gone
                with contextlib.ExitStack() as mine:
                    theirs = {d: left[d] for d in sorted(left) if not self._try_lock(mine, d)}
                    left = self._fill(plan, {d: ps for d, ps in left.items() if d not in theirs}, placed, fetch,
                                      tag)
                for digest, members in theirs.items():  # held by others: wait, then take what they fetched
                    with self._lock(digest, deadline):
                        left.update(self._fill(plan, {digest: members}, placed, fetch, tag))
        rest = HydratePlan(fetch=left, blob_sizes=plan.blob_sizes, blob_packed=plan.blob_packed)
        return placed, rest

    def _link_present(self, fetch: dict[str, list[Placement]], placed: dict[str, PlacedFile]) \
            -> dict[str, list[Placement]]:
        left: dict[str, list[Placement]] = {}
        known: dict[str, bool] = {}
        for digest, members in fetch.items():
            for p in members:
                sha = p.record.sha256
                if sha not in known:
                    known[sha] = self.trusted(sha)
                st = self.place(sha, p.target) if known[sha] and not p.record.relocate else None
                on_disk = sha
                if known[sha] and p.record.relocate:
                    # Issue 39 hook (format/relocate.py `copy_into`): a relocatable file is the dest's own copy,
                    # rewritten for its dir before its rename; never a link to the shared object.
                    got = relocate.copy_into(self._obj(sha), p.record, p.target, durable=self.durable)
                    st, on_disk = (got[0], got[1].sha256) if got is not None else (None, sha)
                    self.report.copied += got is not None
                if st is None:
                    known[sha] = False
                    left.setdefault(digest, []).append(p)
                else:
                    placed[file_key(p.record.root, p.record.path)] = PlacedFile(on_disk, st.st_size, st.st_mtime_ns)
        return left

    def _fill(self, plan: HydratePlan, todo: dict[str, list[Placement]], placed: dict[str, PlacedFile],
              fetch: Fetch, tag: str) -> dict[str, list[Placement]]:
        """Under the locks of `todo`'s blobs: link what arrived meanwhile, fetch the rest into the node
        cache, link it. Returns what is still not placed."""
        todo = self._link_present(todo, placed)
        if not todo:
            return {}
        sub = HydratePlan(blob_sizes=plan.blob_sizes, blob_packed=plan.blob_packed)
        for digest, members in todo.items():
            seen: set[str] = set()
            for p in members:
                if p.record.sha256 not in seen:
                    seen.add(p.record.sha256)
                    rec = p.record
                    obj = FileRecord(root="node", path=f"{rec.sha256[:2]}/{rec.sha256}", sha256=rec.sha256,
                                     size=rec.size, blob=rec.blob, offset=rec.offset)
                    sub.fetch.setdefault(digest, []).append(Placement(obj, self.object_path(rec.sha256)))
        got, nbytes = fetch(sub, [self.objects], tag)
        self.report.fetched_bytes += nbytes
        for key in got:
            sha = key.rsplit("/", 1)[1]
            path = self.object_path(sha)
            with contextlib.suppress(OSError):
                os.chmod(path, 0o444)
                self._mark(sha, os.lstat(path))
        return self._link_present(todo, placed)

    def _try_lock(self, stack: contextlib.ExitStack, digest: str) -> bool:
        try:
            stack.enter_context(FileLock(self.root / "locks" / digest, timeout=0))
            return True
        except LockBusy:
            return False

    def _lock(self, digest: str, deadline: Deadline) -> FileLock:
        left = deadline.left()
        return FileLock(self.root / "locks" / digest, timeout=600.0 if left is None else max(0.0, left))

    # --- budget ----------------------------------------------------------------------------------------

    def entries(self) -> Iterator[tuple[str, os.stat_result, float]]:
        """(sha, object lstat, last use) of every object."""
        if not self.objects.is_dir():
            return
        for sub in os.scandir(self.objects):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for e in os.scandir(sub.path):
                if not _SHA.fullmatch(e.name) or not e.name.startswith(sub.name):
                    continue   # records, temp files, and anything cachekeeper did not name
                try:
                    st = e.stat(follow_symlinks=False)
                    used = os.lstat(e.path + ".ok").st_mtime
                except OSError:
                    used = 0.0
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                yield e.name, st, used

    def size(self) -> int:
        return sum(st.st_size for _, st, _ in self.entries())

    def evict(self, nbytes: int, *, apply: bool = True) -> int:
        """Remove least recently used objects no dest links (st_nlink == 1) until `nbytes` are freed;
        returns the bytes freed (or that would be, without `apply`)."""
        freed = 0
        for sha, st, _ in sorted(self.entries(), key=lambda e: e[2]):
            if freed >= nbytes:
                break
            if st.st_nlink > 1:
                continue   # linked into a dest: in use, and freeing it would free nothing anyway
            if apply:
                self._discard(sha)
            freed += st.st_size
        return freed


_SHA = re.compile(r"[0-9a-f]{64}")
_FICLONE = 0x40049409


def _can_reflink(src_dir: Path, dst_dir: Path) -> bool:
    """Whether a reflink from `src_dir` into `dst_dir` works here (one probe per run)."""
    import fcntl

    ensure_dir(dst_dir)
    a, b = temp_path(src_dir / "reflink-probe"), temp_path(dst_dir / "reflink-probe")
    try:
        a.write_bytes(b"x")
        with open(a, "rb") as fin, open(b, "xb") as fout:
            fcntl.ioctl(fout.fileno(), _FICLONE, fin.fileno())
        return True
    except OSError:
        return False
    finally:
        for p in (a, b):
            with contextlib.suppress(OSError):
                p.unlink()


def _write_exclusive(path: Path, data: bytes) -> None:
    tmp = temp_path(path)
    tmp.write_bytes(data)
    try:
        os.link(tmp, path)
    finally:
        tmp.unlink()


def last_use_order(cache: NodeCache) -> list[tuple[str, int, float, bool]]:
    """(sha, size, last use, in use) oldest first: what gc would evict, in order."""
    return [(sha, st.st_size, used, st.st_nlink > 1)
            for sha, st, used in sorted(cache.entries(), key=lambda e: e[2])]

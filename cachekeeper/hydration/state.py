"""The hydrate state file: what cachekeeper placed in a destination, so a repeat run is a stat() walk.

Lives at `<dest>/.cachekeeper/state.json`, written last (atomically) after every file is in place. It
records the toolchain of the directory: one directory holds one toolchain, never a mix.

Version 2 adds how it was made durable (`durability`), the boot that wrote it (`boot_id`) and the
filesystem it describes (`filesystem`): a boot-bound state file is trusted only within that boot and on
that filesystem (`trusted`), else every file it lists is re-verified. Version 1 files still load (they
were written with per-file fsyncs); a newer version is not read (the files are re-verified instead).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DestStateError
from ..fs.atomic import atomic_write_bytes
from ..fs.locks import FileLock
from ..fs.paths import NotRegular, open_regular

STATE_DIR = ".cachekeeper"
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)


def state_dir(dest: Path) -> Path:
    return dest / STATE_DIR


@dataclass(frozen=True)
class PlacedFile:
    sha256: str
    size: int
    mtime_ns: int


@dataclass
class State:
    fingerprint_id: str = ""
    backend: str = ""
    manifests: dict[str, str] = field(default_factory=dict)       # manifest name -> digest
    files: dict[str, PlacedFile] = field(default_factory=dict)    # "root/path" -> what we placed
    roots: dict[str, str] = field(default_factory=dict)           # root name -> absolute dir
    signed: dict[str, list[str]] = field(default_factory=dict)    # manifest name -> trusted key ids it passed
    # Captured sets the store listed when this dest was last hydrated (applied or not): a no-op hydrate
    # lists the captured sets once and does the full run only when one is not here. Optional in the file.
    captured_seen: list[str] = field(default_factory=list)
    durability: str = "fsync"     # fsync | boot | both (fs/durability.py); v1 files were fsynced
    boot_id: str = ""             # the boot that wrote it
    filesystem: str = ""          # "<fstype>:<st_dev>" of the dest

    def to_json(self) -> bytes:
        return json.dumps({
            "v": STATE_VERSION, "fingerprint_id": self.fingerprint_id, "backend": self.backend,
            "manifests": self.manifests, "roots": self.roots, "signed": self.signed,
            "captured_seen": sorted(self.captured_seen),
            "files": {k: [f.sha256, f.size, f.mtime_ns] for k, f in sorted(self.files.items())},
            "durability": self.durability, "boot_id": self.boot_id, "filesystem": self.filesystem,
        }, sort_keys=True).encode()


def file_key(root: str, path: str) -> str:
    return f"{root}/{path}"


def load_state(dest: Path) -> State | None:
    """None when the destination was never hydrated, or its state is lost, unreadable, of a newer version
    or malformed: then every file is re-verified (and adopted if right), never trusted."""
    return read_state(dest)[0]


def read_state(dest: Path) -> tuple[State | None, str]:
    """(the state, or None; why a state file that is there was not read: "" when it was, or is absent).
    The file is input like any other (a server may have written it): every field is type-checked, and
    a listed path that could leave its root makes the whole file unread. Only a state dir or file that
    cannot be replaced (a directory where state.json goes) is an error."""
    path = state_dir(dest) / "state.json"
    try:
        raw = read_own(path)
    except FileNotFoundError:
        return None, ""
    except NotARecord as exc:
        return None, f"{path} is {exc}"
    except OSError as exc:
        raise DestStateError(f"cannot read hydrate state {path}: {exc.strerror or exc}",
                             "remove it; the next hydrate re-verifies the files it finds", path=str(path)) from None
    try:
        return _parse_state(json.loads(raw)), ""
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
        return None, f"{path} is not a state file this release reads ({_why(exc)})"


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def _parse_state(d: object) -> State:
    if not isinstance(d, dict):
        raise TypeError(f"a JSON {type(d).__name__}, not an object")
    if d.get("v") not in READABLE_VERSIONS or isinstance(d.get("v"), bool):
        raise ValueError(f"version {d.get('v')!r}; this release reads {', '.join(map(str, READABLE_VERSIONS))}")
    files = {}
    for k, v in _dict(d["files"], "files").items():
        if not (isinstance(v, list) and len(v) == 3 and isinstance(v[0], str) and _is_count(v[1])
                and isinstance(v[2], int) and not isinstance(v[2], bool)):
            raise TypeError(f"files[{k!r}] is not [sha256, size, mtime_ns]")
        files[_key(k)] = PlacedFile(v[0], v[1], v[2])
    roots = {_str(k): _str(v) for k, v in _dict(d.get("roots", {}), "roots").items()}
    if any(not os.path.isabs(v) for v in roots.values()):
        raise ValueError("a root is not an absolute path")
    signed = {_str(k): [_str(i) for i in _list(v, "signed")] for k, v in _dict(d.get("signed", {}), "signed").items()}
    return State(
        fingerprint_id=_str(d["fingerprint_id"]), backend=_str(d["backend"]),
        manifests={_str(k): _str(v) for k, v in _dict(d["manifests"], "manifests").items()},
        roots=roots, signed=signed, captured_seen=[_str(n) for n in _list(d.get("captured_seen", []), "captured_seen")],
        files=files, durability=_str(d.get("durability", "fsync")), boot_id=_str(d.get("boot_id", "")),
        filesystem=_str(d.get("filesystem", "")),
    )


def _dict(v: object, what: str) -> dict[str, object]:
    if not isinstance(v, dict):
        raise TypeError(f"{what} is not an object")
    return v


def _list(v: object, what: str) -> list[object]:
    if not isinstance(v, list):
        raise TypeError(f"{what} is not a list")
    return v


def _str(v: object) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{v!r} is not a string")
    return v


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62


def _key(k: str) -> str:
    """A "root/path" key whose path stays inside its root (no absolute path, no `..`, no empty part)."""
    root, _, rel = k.partition("/")
    if not root or not safe_rel(rel):
        raise ValueError(f"listed path {k!r} could leave its root")
    return k


def safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and all(p not in ("", ".", "..") for p in parts) and "\0" not in rel


USED = "used"   # <dest>/.cachekeeper/used/<entry name>.json: the entry's files; its mtime is its last use
READY_MARKER, COMPLETE_MARKER = "ready", "complete"   # hot first's markers (ready.py writes them)


def hot_first_marks(dest: Path) -> tuple[list[str] | None, bool]:
    """(the entries `<dest>/.cachekeeper/ready` names, None without a readable one; whether `complete` is
    there), as a serving process reads them (it never imports the engine): input like any other."""
    try:
        doc = json.loads(read_own(state_dir(dest) / READY_MARKER, 16 << 20))
        entries = doc["entries"] if isinstance(doc, dict) else None
        ready = [e for e in entries if isinstance(e, str)] if isinstance(entries, list) else None
    except (OSError, NotARecord, ValueError, RecursionError, KeyError):
        ready = None
    return ready, (state_dir(dest) / COMPLETE_MARKER).is_file()


def used_record(dest: Path, name: str) -> Path:
    """The last-use record of entry `name` (hydration/usage.py evicts by it); a name that could leave
    `used/` (a state file is input) names one that is never there."""
    if not safe_rel(name):
        return state_dir(dest) / USED / ".unsafe-name"
    return state_dir(dest) / USED / f"{name}.json"


def record_use(dest: Path, names: Iterable[str]) -> None:
    """Mark entries used now (the no-op hydrate, the runtime helper): one utime each, no write. With the
    dest's records, not the eviction, because a serving process calls it and never imports the engine."""
    for name in names:
        with contextlib.suppress(OSError):
            os.utime(used_record(dest, name), follow_symlinks=False)


class NotARecord(Exception):
    """A bookkeeping path that is there but is no regular file of a sane size (a FIFO, a symlink...)."""


MAX_RECORD = 1 << 30


def read_own(path: Path, limit: int = MAX_RECORD) -> bytes:
    """The bytes of one of cachekeeper's own small files, never blocking on a FIFO or following a
    symlink swapped in for it: FileNotFoundError when absent, NotARecord when it is no regular file
    (or larger than `limit`), another OSError when it cannot be read."""
    try:
        f = open_regular(path, follow=False)
    except NotRegular as exc:
        raise NotARecord(str(exc)) from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise NotARecord(f"{size} bytes, more than {limit}")
        return f.read(limit + 1)


def trusted(state: State, dest: Path) -> bool:
    """May the sizes and mtimes this state lists stand for verified bytes now? A fsync-durable state
    always; a boot-bound one only within the boot that wrote it, on the filesystem it describes (after
    a power loss a listed file can hold zeros under its size and mtime)."""
    from ..fs.durability import boot_bound, boot_id, filesystem

    if not boot_bound(state.durability):  # type: ignore[arg-type]
        return True
    return bool(state.boot_id) and state.boot_id == boot_id() and state.filesystem == filesystem(dest)


def save_state(dest: Path, state: State) -> None:
    path = state_dir(dest) / "state.json"
    if path.is_dir() and not path.is_symlink():   # someone made a dir of it: ours to replace, never to follow
        import shutil

        shutil.rmtree(path, ignore_errors=True)
    atomic_write_bytes(path, state.to_json())


def drop_state(dest: Path) -> None:
    """Unclaim `dest`: a run that placed nothing leaves no state naming its toolchain."""
    (state_dir(dest) / "state.json").unlink(missing_ok=True)


def stat_matches(path: Path, placed: PlacedFile) -> bool:
    try:
        st = os.lstat(path)  # a symlink swapped in for a placed file never matches
    except OSError:
        return False
    return st.st_size == placed.size and st.st_mtime_ns == placed.mtime_ns and stat.S_ISREG(st.st_mode)


def plain_file(root: Path, rel: str) -> Path | None:
    """`root/rel` when it is a regular file reached through real directories only (a symlinked dir on the
    way could lead a delete anywhere); else None. `rel` must be `safe_rel`."""
    here = root
    parts = rel.split("/")
    for part in parts[:-1]:
        here = here / part
        if here.is_symlink() or not here.is_dir():
            return None
    path = here / parts[-1]
    try:
        return path if stat.S_ISREG(os.lstat(path).st_mode) else None
    except OSError:
        return None


def own_records_dir(dest: Path) -> None:
    """`<dest>/.cachekeeper` is cachekeeper's: a symlink or file someone put in its place is removed (never
    followed: the state file would be written wherever it points)."""
    path = state_dir(dest)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except OSError as exc:
            raise DestStateError(f"{path} is not a directory and cannot be removed: {exc.strerror}",
                                 path=str(path)) from None


def records_lock(dest: Path, name: str = "lock", timeout: float = 600.0) -> FileLock:
    """The lock `<dest>/.cachekeeper/<name>`. Its records dir and the lock file are cachekeeper's: a
    symlink, file, directory or FIFO someone left in their place is removed first (a lock is only ever
    an empty regular file, and one that is not cannot be held by anyone)."""
    own_records_dir(dest)
    path = state_dir(dest) / name
    try:
        st = os.lstat(path)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            if stat.S_ISDIR(st.st_mode):
                import shutil

                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError as exc:
            raise DestStateError(f"{path} is not a lock file and cannot be removed: {exc.strerror}",
                                 path=str(path)) from None
    return FileLock(path, timeout=timeout)

"""Relocatable files: the build's root path out at snapshot, the served dir in at hydrate, byte for byte.

A compiler's cache names its own directory inside files the server reads: Inductor's pickled Triton
autotuners keep the kernel's absolute `filename` (the `.best_config` lookups follow it), Triton's
`__grp__*.json` list absolute child paths and count a hit only if they exist (docs/backends.md, "A
hydrated dir is as fast as the dir it was built in"). Served from another dir, those paths are stale.

No format is parsed. A builder compiles into a root whose absolute path has a known length (the backend
pads it, `RESERVED`); at snapshot every occurrence of that path in a file is replaced by a placeholder
of the same length (`placeholder`), and the file's manifest record says so (`FileRecord.relocate`, the
length). At hydrate the placeholder becomes the served root, padded to the same length with "/" (POSIX
reads `a///b` as `a/b`). Equal lengths keep every length-prefixed string valid: pickles, pickles
nested in pickles, ELF string tables.

Files whose occurrences nothing reads at load are left as the compiler wrote them and not marked: ELF
objects (kernel `.so`, cubins) whose occurrences all lie in sections the loader never maps (debug info),
and GCC precompiled headers (the header's path is in its line map, for diagnostics; GCC uses a header
moved from a deleted build dir). Every other file that names the root is marked.

The hydrate side (`commit`, `local_record`, `copy_into`) is what hydrate's commit path calls for a marked
record, once its published bytes are verified: the rewrite happens in hydrate's own temp file, before
its rename, and the record returned carries the sha256 of the bytes placed (what the state records).
"""

from __future__ import annotations

import dataclasses
import hashlib
import mmap
import os
import struct
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import DestinationError, IntegrityError
from ..fs.atomic import AtomicFile, fsync_dir
from ..fs.paths import ensure_dir

if TYPE_CHECKING:
    from .manifest import FileRecord

STEM = b"/.cachekeeper-build-root-"   # starts every placeholder; no "/" after its first byte
MIN_LENGTH = len(STEM) + 1            # a root path shorter than this is not made relocatable
MAX_LENGTH = 4095                     # PATH_MAX - 1: a record's `relocate` is a path length
RESERVED = 200                        # the length builders pad a relocatable root's path to
PAD = b"@"
_ELF = b"\x7fELF"
_PCH = b"gpch"                        # GCC's precompiled-header magic (c-family/c-pch.cc)
_SHF_ALLOC = 0x2                      # ELF section flag: mapped into memory at load
_SHT_NOBITS = 8

Kind = Literal["none", "debug", "relocate"]


def placeholder(length: int) -> bytes:
    """What a relocatable root's path becomes in published bytes: `length` bytes, never a real path."""
    if not MIN_LENGTH <= length <= MAX_LENGTH:
        raise ValueError(f"a relocatable root's path is {MIN_LENGTH} to {MAX_LENGTH} bytes, not {length}")
    return STEM + PAD * (length - len(STEM))


def served(root: str, length: int) -> bytes:
    """The served root as it replaces a placeholder of `length` bytes: padded with "/" to that length."""
    raw = os.fsencode(root.rstrip("/") or "/")
    if len(raw) > length:
        raise DestinationError(
            f"{root} is {len(raw)} bytes long; the relocatable files built for it reserve {length} for the path "
            "they are served from", f"hydrate into a dest whose toolchain dir is at most {length} bytes long",
            path=root)
    return raw + b"/" * (length - len(raw))


def root_of(target: Path | str, relpath: str) -> str:
    """The root a placed file belongs to: its path less the record's relative path (plan.py joins them)."""
    text = os.fspath(target)
    if not text.endswith("/" + relpath):
        raise ValueError(f"{text} does not end with {relpath}")
    return text[: -len(relpath) - 1]


# --- snapshot side -------------------------------------------------------------------------------------


def classify(data: bytes | mmap.mmap, pattern: bytes) -> Kind:
    """What a file naming `pattern` needs: "none" (it does not), "debug" (only where nothing reads it at
    load: ELF sections the loader never maps, a GCC precompiled header), or "relocate"."""
    first = data.find(pattern)
    if first < 0:
        return "none"
    head = bytes(data[:4])
    if head == _PCH:
        return "debug"
    if head == _ELF:
        loaded = elf_loaded_ranges(data)
        if loaded is not None and not any(start <= off < end for off in _find_all(data, pattern, first)
                                          for start, end in loaded):
            return "debug"
    return "relocate"


def elf_loaded_ranges(data: bytes | mmap.mmap) -> list[tuple[int, int]] | None:
    """File ranges of the sections an ELF file maps at load (SHF_ALLOC), or None when it does not parse
    (then every occurrence counts as read)."""
    try:
        wide = {1: False, 2: True}[data[4]]
        endian = {1: "<", 2: ">"}[data[5]]
        if wide:
            shoff, = struct.unpack_from(endian + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(endian + "HH", data, 0x3A)
            fmt = endian + "IIQQQQ"
        else:
            shoff, = struct.unpack_from(endian + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(endian + "HH", data, 0x2E)
            fmt = endian + "IIIIII"
        if shnum == 0 or shoff + shnum * shentsize > len(data):
            return None
        out = []
        for i in range(shnum):
            _, kind, flags, _, offset, size = struct.unpack_from(fmt, data, shoff + i * shentsize)
            if flags & _SHF_ALLOC and kind != _SHT_NOBITS:
                out.append((offset, offset + size))
        return out
    except (KeyError, IndexError, struct.error):
        return None


def _find_all(data: bytes | mmap.mmap, pattern: bytes, start: int = 0) -> Iterator[int]:
    at = data.find(pattern, start)
    while at >= 0:
        yield at
        at = data.find(pattern, at + len(pattern))


def mark_file(path: Path, pattern: bytes) -> Kind:
    """Classify a built file and, when it is to be relocated, replace `pattern` by its placeholder in
    place (the build's own file: the snapshot reads it next). Sizes never change. A file an earlier
    snapshot of the same build rewrote (it holds the placeholder already) is "relocate" too."""
    stand_in = placeholder(len(pattern))
    with open(path, "r+b") as f:
        if os.fstat(f.fileno()).st_size < len(pattern):
            return "none"
        with mmap.mmap(f.fileno(), 0) as mm:
            kind = classify(mm, pattern)
            if kind == "relocate":
                for at in list(_find_all(mm, pattern)):
                    mm[at:at + len(pattern)] = stand_in
                mm.flush()
            elif kind == "none" and mm.find(stand_in) >= 0:
                kind = "relocate"
    return kind


def pattern_of(root: Path) -> bytes | None:
    """The bytes a build root's path is written as, or None when it is too short to relocate."""
    raw = os.fsencode(str(root))
    return raw if MIN_LENGTH <= len(raw) <= MAX_LENGTH else None


def scrub(record: Mapping[str, Any], roots: Mapping[str, Path]) -> dict[str, Any]:
    """An informative record (a manifest's `build`) with each root's path written `${root}`: JSON, so any
    length will do, and no reader resolves it."""
    order = sorted(roots.items(), key=lambda kv: -len(str(kv[1])))

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            for name, root in order:
                value = value.replace(str(root), "${" + name + "}")
            return value
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return {k: clean(v) for k, v in record.items()}


# --- hydrate side --------------------------------------------------------------------------------------

# sha256 of (published bytes, root, length) -> sha256 of the rewritten bytes: a memo of a pure function,
# so that a second copy of the same file in the same root (hydrate copies identical files from the first
# one placed) is recognised as right. Bounded: a long-lived process forgets the oldest.
_MEMO: dict[tuple[str, str, int], str] = {}
_MEMO_MAX = 1 << 16
_MEMO_LOCK = threading.Lock()


def _remember(key: tuple[str, str, int], sha: str) -> None:
    with _MEMO_LOCK:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = sha


def commit(record: FileRecord, target: Path, out: AtomicFile, actual: str) -> FileRecord | None:
    """For a marked record whose bytes are in `out` (hydrate's own temp file, not yet renamed) and hash to
    `actual`: the record of what is placed (its sha256 is the rewritten file's), or None when the bytes are
    wrong. Published bytes are rewritten here; a copy of a file already rewritten for this root is taken
    as it is."""
    root = root_of(target, record.path)
    key = (record.sha256, root, record.relocate)
    if actual != record.sha256:
        with _MEMO_LOCK:
            known = _MEMO.get(key)
        return dataclasses.replace(record, sha256=actual) if known == actual else None
    try:
        sha = _rewrite(out.tmp, record.relocate, root)
    except OSError as exc:
        out.abort()
        raise DestinationError(f"cannot rewrite {target} for its dir: {exc.strerror or exc}",
                               path=str(target)) from None
    except DestinationError:
        out.abort()
        raise
    _remember(key, sha)
    return dataclasses.replace(record, sha256=sha)


def _rewrite(path: Path, length: int, root: str) -> str:
    """Replace every placeholder of `length` in `path` (our own temp file) by `root`; the new sha256."""
    stand_in, here = placeholder(length), served(root, length)
    with open(path, "r+b") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return hashlib.sha256(b"").hexdigest()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for at in list(_find_all(mm, stand_in)):
                os.pwrite(f.fileno(), here, at)
            return hashlib.sha256(mm).hexdigest()


def local_record(record: FileRecord, target: Path) -> FileRecord | None:
    """A marked record's file found at `target` (a resume, a lost or untrusted state): the record of it
    (with its on-disk sha256) when it is exactly the published bytes rewritten for this root, else None.

    Undoing the rewrite (the served root back to the placeholder) must give the published sha256, and the
    file must hold no placeholder itself: the placeholder has "/" only at its start, so no occurrence can
    straddle a replaced one, and the file is then exactly what `commit` would have written."""
    root = root_of(target, record.path)
    try:
        here = served(root, record.relocate)
    except DestinationError:
        return None
    stand_in = placeholder(record.relocate)
    try:
        with open(target, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return record if record.sha256 == hashlib.sha256(b"").hexdigest() else None
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                if mm.find(stand_in) >= 0:
                    return None
                undone = hashlib.sha256()
                pos = 0
                for at in _find_all(mm, here):
                    undone.update(mm[pos:at])
                    undone.update(stand_in)
                    pos = at + len(here)
                undone.update(mm[pos:])
                if undone.hexdigest() != record.sha256:
                    return None
                return dataclasses.replace(record, sha256=hashlib.sha256(mm).hexdigest())
    except (OSError, ValueError):
        return None


def copy_into(source: str | Path, record: FileRecord, target: Path, *, durable: bool,
              tag: str | None = None) -> tuple[os.stat_result, FileRecord] | None:
    """Place a marked record from a verified copy of its published bytes elsewhere (the node cache's
    object): copied, never linked, then rewritten in the copy and renamed into place. None when the
    source is gone (the caller fetches it)."""
    ensure_dir(target.parent)
    out = AtomicFile(target, tag, writeback=durable)
    h = hashlib.sha256()
    try:
        with open(source, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
    except FileNotFoundError:
        out.abort()
        return None
    except OSError as exc:
        out.abort()
        raise DestinationError(f"cannot read {source}: {exc.strerror}", path=str(source)) from None
    placed = commit(record, target, out, h.hexdigest())
    if placed is None:
        out.abort()
        raise IntegrityError(f"{source} for {record.path} failed verification", path=str(source))
    st = out.commit(fsync=durable)
    if durable:
        fsync_dir(target.parent)
    return st, placed

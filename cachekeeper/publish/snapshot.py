"""Snapshot built cache roots into blobs: large files stand alone, small files are packed.

Pure planning (`plan_blobs`) is separate from reading files (`scan_roots`, `iter_blobs`): a Neuron eager
cache is thousands of small NEFFs, and one pack object per ~64 MiB turns that small-file download into
a large-file one. A pack is the plain concatenation of its members, in manifest order; each member is
found by (blob, offset, size) and verified by its own sha256, so no archive format (and no archive
path) is ever parsed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..format import relocate
from ..format.manifest import BlobRecord, FileRecord
from ..fs.paths import TMP_SUFFIX, sha256_file

SMALL_FILE = 4 << 20     # files below this are packed
PACK_TARGET = 64 << 20   # a pack is closed once it reaches this size


@dataclass(frozen=True)
class LocalFile:
    root: str
    path: str            # POSIX, relative to the root
    abspath: Path
    size: int
    relocate: int = 0    # > 0: its bytes name its root as a placeholder this long (format/relocate.py)


@dataclass(frozen=True)
class PendingBlob:
    record: BlobRecord
    source: Path | bytes  # a file to upload as is, or a pack's bytes


def scan_roots(roots: Mapping[str, Path], include: Callable[[str, str, Path], bool]) -> list[LocalFile]:
    """Regular files under each root that `include` keeps, sorted; symlinks and temp files never travel."""
    found: list[LocalFile] = []
    for root_name, root in sorted(roots.items()):
        if not root.is_dir():
            continue
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(dirpath, d))]
            for name in files:
                full = Path(dirpath, name)
                if name.endswith(TMP_SUFFIX) or full.is_symlink() or not full.is_file():
                    continue
                rel = full.relative_to(root).as_posix()
                if include(root_name, rel, full):
                    found.append(LocalFile(root_name, rel, full, full.stat().st_size))
    found.sort(key=lambda f: (f.root, f.path))
    return found


def make_relocatable(files: list[LocalFile], roots: Mapping[str, Path]) -> list[LocalFile]:
    """The build's files with every root of `roots` (the relocatable ones: the backend's choice) written as a
    placeholder of its path's length, in place, and marked; files where only debug info names it are left
    as built (format/relocate.py says which). A root too short for a placeholder is left as it is."""
    patterns = {name: relocate.pattern_of(path) for name, path in roots.items()}
    out = []
    for f in files:
        pattern = patterns.get(f.root)
        if pattern is not None and relocate.mark_file(f.abspath, pattern) == "relocate":
            f = dataclasses.replace(f, relocate=len(pattern))
        out.append(f)
    return out


def plan_packs(files: list[LocalFile]) -> tuple[list[LocalFile], list[list[LocalFile]]]:
    """Split into (standalone files, packs of small files); pure, deterministic."""
    large = [f for f in files if f.size >= SMALL_FILE]
    packs: list[list[LocalFile]] = []
    current: list[LocalFile] = []
    size = 0
    for f in files:
        if f.size >= SMALL_FILE:
            continue
        current.append(f)
        size += f.size
        if size >= PACK_TARGET:
            packs.append(current)
            current, size = [], 0
    if current:
        packs.append(current)
    return large, packs


def iter_blobs(files: list[LocalFile]) -> Iterator[tuple[list[FileRecord], PendingBlob]]:
    """Yield each blob with the file records it holds. Packs are built one at a time (bounded memory)."""
    large, packs = plan_packs(files)
    for f in large:
        digest = sha256_file(f.abspath)
        rec = FileRecord(f.root, f.path, f.size, digest, digest, 0, f.relocate)
        yield [rec], PendingBlob(BlobRecord(digest, f.size, packed=False), f.abspath)
    for members in packs:
        buf = bytearray()
        pending: list[tuple[LocalFile, str, int]] = []
        for f in members:
            data = f.abspath.read_bytes()
            pending.append((f, hashlib.sha256(data).hexdigest(), len(buf)))
            buf += data
        digest = hashlib.sha256(buf).hexdigest()
        recs = [FileRecord(f.root, f.path, size, sha, digest, off, f.relocate)
                for (f, sha, off), size in zip(pending, _sizes(pending, len(buf)), strict=True)]
        yield recs, PendingBlob(BlobRecord(digest, len(buf), packed=True), bytes(buf))


def _sizes(pending: list[tuple[LocalFile, str, int]], total: int) -> list[int]:
    # Sizes from offsets: what was actually read, even if a file changed size after scan_roots.
    offsets = [off for _, _, off in pending] + [total]
    return [offsets[i + 1] - offsets[i] for i in range(len(pending))]

"""Pure hydrate planning: which files of which manifests must be fetched, kept or checked.

No I/O except through the `probe` callback, so every branch is testable with plain values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ManifestError
from ..format.manifest import FileRecord, Manifest
from ..fs.paths import SafeJoiner
from .state import PlacedFile, State, file_key

# probe(path, placed-record-or-None) -> "ok" (placed and unchanged), "check" (present, unknown), "missing"
Probe = Callable[[Path, PlacedFile | None], str]
# check_parents(root dir, relative path): raises if a directory on the way is a symlink or not a dir
ParentCheck = Callable[[Path, str], None]


@dataclass(frozen=True)
class Placement:
    record: FileRecord
    target: Path


@dataclass
class HydratePlan:
    fetch: dict[str, list[Placement]] = field(default_factory=dict)   # blob digest -> files to write from it
    check: list[Placement] = field(default_factory=list)              # present but unverified: hash locally
    keep: list[Placement] = field(default_factory=list)               # placed earlier, unchanged
    shadowed: list[Placement] = field(default_factory=list)           # same path in two manifests: first wins
    blob_sizes: dict[str, int] = field(default_factory=dict)
    blob_packed: dict[str, bool] = field(default_factory=dict)

    @property
    def is_noop(self) -> bool:
        return not self.fetch and not self.check

    @property
    def fetch_bytes(self) -> int:
        return sum(p.record.size for ps in self.fetch.values() for p in ps)


def plan_hydrate(manifests: list[Manifest], roots: Mapping[str, Path], state: State | None,
                 probe: Probe, check_parents: ParentCheck | None = None,
                 joiner: SafeJoiner | None = None) -> HydratePlan:
    """Manifests are applied in the given order; a path claimed twice keeps the first manifest's bytes.

    Deterministic refusals happen here, before any fetch: a root the backend does not have, and a path
    that is a file in one manifest and a directory in another (whatever order threads would write them).
    `check_parents(root, rel)` vets the directories on the way (symlinks, files in the way); given the
    `joiner` it reads, it finds their lstats already taken by `joiner.join`.
    """
    plan = HydratePlan()
    joiner = joiner or SafeJoiner()
    claimed: set[str] = set()
    dirs: dict[str, str] = {}    # "root/dir" -> the manifest that needs it to be a directory
    owners: dict[str, str] = {}  # "root/path" -> the manifest that places a file there
    placed = state.files if state else {}
    for m in manifests:
        blobs = {b.digest: b for b in m.blobs}
        for rec in m.files:
            if rec.root not in roots:
                raise ManifestError(f"manifest {m.name} places files in root {rec.root!r}, which this backend "
                                    f"does not have (it has {', '.join(sorted(roots))})")
            _claim_dirs(m.name, rec, dirs, owners)
            target = joiner.join(roots[rec.root], rec.path)
            if check_parents is not None:
                check_parents(roots[rec.root], rec.path)
            key = file_key(rec.root, rec.path)
            p = Placement(rec, target)
            if key in claimed:
                plan.shadowed.append(p)
                continue
            claimed.add(key)
            plan.blob_sizes[rec.blob] = blobs[rec.blob].size
            plan.blob_packed[rec.blob] = blobs[rec.blob].packed
            prior = placed.get(key)
            verdict = probe(target, prior if prior and prior.sha256 == rec.sha256 else None)
            if verdict == "ok":
                plan.keep.append(p)
            elif verdict == "check":
                plan.check.append(p)
            else:
                plan.fetch.setdefault(rec.blob, []).append(p)
    return plan


def _claim_dirs(name: str, rec: FileRecord, dirs: dict[str, str], owners: dict[str, str]) -> None:
    key = file_key(rec.root, rec.path)
    parts = rec.path.split("/")
    if key in dirs:
        raise ManifestError(f"{rec.root}/{rec.path} is a file in manifest {name} and a directory in {dirs[key]}")
    for i in range(1, len(parts)):
        d = file_key(rec.root, "/".join(parts[:i]))
        if d in owners:
            raise ManifestError(f"{d} is a file in manifest {owners[d]} and a directory in {name}")
        dirs.setdefault(d, name)
    owners.setdefault(key, name)


def coalesce(placements: list[Placement], gap: int = 1 << 20) -> list[tuple[int, int, list[Placement]]]:
    """Group slices of one pack into ranged reads: (start, length, members), merging gaps below `gap`."""
    ranges: list[tuple[int, int, list[Placement]]] = []
    for p in sorted(placements, key=lambda p: p.record.offset):
        start, end = p.record.offset, p.record.offset + p.record.size
        if ranges and start - (ranges[-1][0] + ranges[-1][1]) <= gap:
            s, length, members = ranges[-1]
            ranges[-1] = (s, max(length, end - s), [*members, p])
        else:
            ranges.append((start, end - start, [p]))
    return ranges

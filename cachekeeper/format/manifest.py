"""Manifests: the signed-off list of files that make one entry (or one toolchain-shared set).

A manifest is canonical JSON, stored at `manifests/<fingerprint id>/<name>.json` and addressed by the
sha256 of its bytes (its `digest`), so a lockfile can pin exact bytes. It names every file with its
root, relative path, size and sha256, and where the bytes live: a blob of its own (large files; the
blob digest is the file's sha256) or a slice of a pack blob (small files, concatenated).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ManifestError
from ..fs.paths import safe_relpath
from . import canonical
from .fingerprint import Fingerprint
from .layout import CAPTURED_DIR, manifest_key
from .spec import EntrySpec

__all__ = ["KIND_CAPTURED", "KIND_ENTRY", "KIND_SHARED", "BlobRecord", "FileRecord", "Manifest",
           "check_placement_paths", "schema_for"]

SCHEMA = 1
KIND_ENTRY = "entry"
KIND_SHARED = "shared"
# Runtime compiles a serving host wrote back (`cachekeeper capture --publish`). They carry schema 2 (with
# `provenance`), so a reader that predates them says "unknown manifest schema 2" instead of misreading one,
# and they live under `manifests/<fp>/captured/` (see layout.py), where an older hydrate's listing never
# finds them.
KIND_CAPTURED = "captured"
SCHEMA_CAPTURED = 2
# Entry and shared manifests with relocatable files (a record's `relocate`: format/relocate.py) carry schema
# 3: hydrate must rewrite those files for the dir it serves, so a reader that predates them says "unknown
# manifest schema 3" instead of placing files that name a placeholder. Without one they stay schema 1 (the
# same bytes, digests and lockfiles as before).
SCHEMA_RELOCATED = 3
READ_SCHEMAS = (SCHEMA, SCHEMA_CAPTURED, SCHEMA_RELOCATED)
_CAPTURED_NAME = re.compile(rf"{CAPTURED_DIR}[0-9a-f]{{16}}")   # layout.captured_set_name of 16 hex


def schema_for(kind: str, relocated: bool = False) -> int:
    if kind == KIND_CAPTURED:
        return SCHEMA_CAPTURED
    return SCHEMA_RELOCATED if relocated else SCHEMA


@dataclass(frozen=True)
class FileRecord:
    root: str          # "cache" or a backend's extra root ("pch")
    path: str          # POSIX path relative to the root
    size: int
    sha256: str
    blob: str          # digest of the blob holding the bytes
    offset: int = 0    # where they start in that blob (0 for a blob of its own)
    # > 0: the bytes name the build's root as a placeholder of this many bytes, which hydrate replaces by
    # the root it serves (format/relocate.py); `sha256` is of the published bytes. Schema 3 only.
    relocate: int = 0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"root": self.root, "path": self.path, "size": self.size, "sha256": self.sha256,
                             "blob": self.blob, "offset": self.offset}
        if self.relocate:
            d["relocate"] = self.relocate
        return d


@dataclass(frozen=True)
class BlobRecord:
    digest: str
    size: int
    packed: bool       # True: a pack of small files; False: one file's bytes


@dataclass(frozen=True)
class Manifest:
    kind: str                              # "entry", "shared" or "captured"
    name: str                              # entry key, shared-set name ("pch-<hash>"), "captured/<hash>"
    fingerprint: Fingerprint
    files: tuple[FileRecord, ...]
    blobs: tuple[BlobRecord, ...]
    spec: EntrySpec | None = None          # set for kind == "entry"
    requires: tuple[str, ...] = ()         # names of shared manifests (same fingerprint) to hydrate too
    build: dict[str, Any] = field(default_factory=dict)   # host, durations, counters: informative only
    # kind == "captured" only: host, time, the state it extended ("state": sha256 of the state file,
    # "extends": the manifest names hydrated there); hydrate picks captured sets by "extends".
    provenance: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return manifest_key(self.fingerprint.id, self.name)

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def schema(self) -> int:
        return schema_for(self.kind, any(f.relocate for f in self.files))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema": self.schema, "kind": self.kind, "name": self.name,
            "fingerprint": self.fingerprint.to_dict(), "fingerprint_id": self.fingerprint.id,
            "spec": self.spec.to_dict() if self.spec else None,
            "requires": list(self.requires),
            "files": [f.to_dict() for f in self.files],
            "blobs": [{"digest": b.digest, "size": b.size, "packed": b.packed} for b in self.blobs],
            "build": self.build,
        }
        if self.kind == KIND_CAPTURED:
            d["provenance"] = self.provenance or {}
        return d

    def to_bytes(self) -> bytes:
        return canonical.dumps(self.to_dict())

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str | None = "manifest") -> Manifest:
        """Parse and validate; every path is checked here so nothing downstream sees a hostile one.
        Messages start with `source`; with None they are the bare reason (a scan reports it beside the key)."""
        if len(data) > MAX_MANIFEST_BYTES:
            raise ManifestError(_at(source, f"{len(data)} bytes, more than a manifest may be ({MAX_MANIFEST_BYTES})"))
        try:
            d = _loads(data, source)
            if not isinstance(d, dict):
                raise ManifestError(_at(source, "not a JSON object"))
            if d.get("schema") not in READ_SCHEMAS or isinstance(d.get("schema"), bool):
                raise ManifestError(_at(source, f"unknown manifest schema {d.get('schema')!r} (this cachekeeper "
                                                f"reads {', '.join(map(str, READ_SCHEMAS))}: upgrade it on this host)"))
            files = tuple(FileRecord(str(f["root"]), str(safe_relpath(f["path"])), _size(f["size"]),
                                     _digest(f["sha256"]), _digest(f["blob"]), _size(f.get("offset", 0)),
                                     _relocate(f["relocate"]) if "relocate" in f else 0)
                          for f in d["files"])
            if d.get("schema") != schema_for(d.get("kind", ""), any(f.relocate for f in files)):
                raise ManifestError(_at(source, f"kind {d.get('kind')!r} does not belong to schema {d['schema']}"
                                                + (" with relocatable files" if any(f.relocate for f in files)
                                                   else "")))
            fp = Fingerprint.from_dict(d["fingerprint"])
            if d.get("fingerprint_id") != fp.id:
                raise ManifestError(_at(source, "fingerprint id does not match its fields"))
            blobs = tuple(BlobRecord(_digest(b["digest"]), _size(b["size"]), bool(b["packed"])) for b in d["blobs"])
            spec = EntrySpec.from_dict(d["spec"]) if d.get("spec") else None
            m = cls(kind=d["kind"], name=str(d["name"]), fingerprint=fp, files=files, blobs=blobs,
                    spec=spec, requires=tuple(d.get("requires", ())), build=dict(d.get("build") or {}),
                    provenance=dict(d["provenance"]) if d.get("kind") == KIND_CAPTURED else None)
        except ManifestError:
            raise
        except RecursionError:
            raise ManifestError(_at(source, "JSON nested too deeply")) from None
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            why = f"malformed manifest ({type(exc).__name__}: {exc})".splitlines()[0]
            raise ManifestError(_at(source, why)) from None
        m.validate(source)
        return m

    def validate(self, source: str | None = "manifest") -> None:
        """Internal consistency: every slice lies inside its blob, paths are unique per root."""
        if self.kind not in (KIND_ENTRY, KIND_SHARED, KIND_CAPTURED):
            raise ManifestError(_at(source, f"unknown manifest kind {self.kind!r}"))
        sizes = {b.digest: b for b in self.blobs}
        seen: set[tuple[str, str]] = set()
        check_placement_paths(self.files, source)
        for f in self.files:
            safe_relpath(f.root)
            blob = sizes.get(f.blob)
            if blob is None or f.offset < 0 or f.size < 0 or f.offset + f.size > blob.size:
                raise ManifestError(_at(source, f"{f.path} points outside its blob"))
            if not blob.packed and (f.offset != 0 or f.sha256 != f.blob):
                raise ManifestError(_at(source, f"{f.path} does not match its single-file blob"))
            if (f.root, f.path) in seen:
                raise ManifestError(_at(source, f"{f.path} listed twice"))
            seen.add((f.root, f.path))
        if self.kind == KIND_ENTRY and (self.spec is None or self.spec.key != self.name):
            raise ManifestError(_at(source, "entry name does not match its spec"))
        if (self.kind == KIND_CAPTURED) != bool(_CAPTURED_NAME.fullmatch(self.name)):
            raise ManifestError(_at(source, "a captured set is named captured/<16 hex>, and only a captured set"))
        if self.kind == KIND_CAPTURED and (self.spec is not None or self.requires):
            raise ManifestError(_at(source, "a captured set has no spec and requires nothing"))
        if self.kind == KIND_CAPTURED and any(f.relocate for f in self.files):
            raise ManifestError(_at(source, "a captured set has no relocatable files (schema 2)"))


# --- bounded input: a manifest comes from a store we may not trust ---------------------------------

MAX_MANIFEST_BYTES = 64 << 20    # ~300k files; anything larger is refused before parsing
MAX_JSON_DEPTH = 32              # manifests nest 5 deep; deeper is hostile
MAX_SIZE = 1 << 44               # 16 TiB: a bound for sizes and offsets, so no arithmetic overflows a report
NAME_MAX = 255                   # bytes per path component (Linux)
PATH_MAX = 4095                  # bytes per relative path
RESERVED_DIR = ".cachekeeper"    # hydrate's state dir in every root: no manifest path may enter it
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _at(source: str | None, why: str) -> str:
    return f"{source}: {why}" if source else why


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a manifest may hold")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is out of range")
    return value


def _depth(value: Any, limit: int) -> int:
    """Nesting depth, giving up (returning > limit) as soon as the limit is passed."""
    if limit < 0:
        return 1
    if isinstance(value, dict):
        return 1 + max((_depth(v, limit - 1) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v, limit - 1) for v in value), default=0)
    return 0


def _loads(data: bytes, source: str | None) -> Any:
    doc = json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    if _depth(doc, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise ManifestError(_at(source, f"JSON nested deeper than {MAX_JSON_DEPTH} levels"))
    return doc


def _size(value: Any) -> int:
    if type(value) is not int or not 0 <= value <= MAX_SIZE:
        raise ValueError(f"{str(value)[:24]!r} is not a size or offset (an integer from 0 to {MAX_SIZE})")
    return value


def _relocate(value: Any) -> int:
    from .relocate import MAX_LENGTH, MIN_LENGTH

    if type(value) is not int or not MIN_LENGTH <= value <= MAX_LENGTH:
        raise ValueError(f"{str(value)[:24]!r} is not a relocatable path length ({MIN_LENGTH} to {MAX_LENGTH})")
    return value


def _digest(value: Any) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise ValueError(f"{str(value)[:24]!r} is not a sha256 digest")
    return value


def check_placement_paths(files: Iterable[FileRecord], source: str | None) -> None:
    """Paths hydrate can place on any Linux filesystem without surprises: within NAME_MAX/PATH_MAX, out
    of the state dir, never a temp name, no two that one normalisation (NFC) makes equal, and no path
    that is a file in one record and a directory in another."""
    from ..errors import UnsafePath
    from ..fs.paths import TMP_SUFFIX

    normal: set[tuple[str, str]] = set()
    file_paths: set[tuple[str, str]] = set()
    dirs: set[tuple[str, str]] = set()
    for f in files:
        parts = f.path.split("/")
        if len(f.path.encode()) > PATH_MAX or any(len(p.encode()) > NAME_MAX for p in parts):
            raise UnsafePath(_at(source, f"path longer than the filesystem allows: {f.path[:60]!r}…"))
        if parts[0] == RESERVED_DIR or any(p.endswith(TMP_SUFFIX) for p in parts):
            raise UnsafePath(_at(source, f"path in cachekeeper's reserved names: {f.path!r}"))
        nfc = (f.root, unicodedata.normalize("NFC", f.path))
        if nfc in normal:
            raise ManifestError(_at(source, f"{f.path!r} is listed twice (equal after Unicode normalisation)"))
        normal.add(nfc)
        file_paths.add((f.root, f.path))
        for i in range(1, len(parts)):
            dirs.add((f.root, "/".join(parts[:i])))
    clash = sorted(file_paths & dirs)
    if clash:
        raise ManifestError(_at(source, f"{clash[0][1]!r} is both a file and a directory"))

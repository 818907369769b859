"""Publish a built entry: blobs first, then the manifest, then the catalog row.

Blobs are planned, then sent: every file is hashed and packed (`plan_blobs`), the store is asked about
all blobs in one batch (`Store.sizes`: parallel HEADs, or stats locally), and only the missing ones are
uploaded, in parallel, under a bound on the bytes in flight.

The manifest is written with an exclusive create, so the first complete build of an entry wins and a
racing worker adopts it; a crash before the manifest leaves only unreferenced blobs (GC removes them),
never a manifest that names missing bytes.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import IntegrityError
from ..format import canonical, relocate
from ..format.fingerprint import Fingerprint
from ..format.layout import blob_key, manifest_key
from ..format.manifest import KIND_ENTRY, KIND_SHARED, BlobRecord, FileRecord, Manifest
from ..format.spec import EntrySpec
from ..fs.paths import sha256_file
from ..stores.base import Store
from .snapshot import LocalFile, iter_blobs, make_relocatable, scan_roots

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..format.signing import SigningKey

UPLOAD_THREADS = 16
MAX_BYTES_IN_FLIGHT = 256 << 20   # uploads (and pack buffers) in memory or on the wire at once: 4 packs


@dataclass(frozen=True)
class PublishResult:
    manifest: Manifest
    created: bool            # False: an identical-name manifest already existed (first writer won)
    uploaded_bytes: int
    blobs_uploaded: int
    blobs_present: int


# --- plan: hash everything, decide what to send (one batch existence check) -------------------------


@dataclass(frozen=True)
class BlobPlan:
    """One blob to publish: a file uploaded as is, or the members of a pack (re-read at upload time, so
    the plan holds hashes, not bytes)."""

    record: BlobRecord
    source: Path | tuple[LocalFile, ...]


@dataclass(frozen=True)
class UploadPlan:
    files: list[FileRecord]
    blobs: list[BlobRecord]      # every blob the manifest names
    send: list[BlobPlan]         # the ones the store lacks
    present: int                 # blobs the store already holds (content-addressed: skipped)


def plan_blobs(local: list[LocalFile]) -> tuple[list[FileRecord], list[BlobPlan]]:
    """Hash every file and pack (one pack in memory at a time); pure of the store."""
    by_path = {(f.root, f.path): f for f in local}
    files: list[FileRecord] = []
    blobs: dict[str, BlobPlan] = {}
    for recs, pending in iter_blobs(local):
        files.extend(recs)
        if pending.record.digest in blobs:
            continue
        source = pending.source if isinstance(pending.source, Path) else \
            tuple(by_path[(r.root, r.path)] for r in recs)
        blobs[pending.record.digest] = BlobPlan(pending.record, source)
    files.sort(key=lambda f: (f.root, f.path))
    return files, sorted(blobs.values(), key=lambda b: b.record.digest)


def plan_upload(store: Store, local: list[LocalFile]) -> UploadPlan:
    files, blobs = plan_blobs(local)
    sizes = store.sizes(blob_key(b.record.digest) for b in blobs)   # one batch: parallel HEADs, or stats
    send: list[BlobPlan] = []
    for b in blobs:
        key = blob_key(b.record.digest)
        present = sizes[key]
        if present is None:
            send.append(b)
        elif present != b.record.size:  # immutable: a bad object can only be deleted, never replaced
            raise IntegrityError(f"{store.url}/{key} is {present} bytes, expected {b.record.size}",
                                 url=store.url, key=key)
    return UploadPlan(files, [b.record for b in blobs], send, len(blobs) - len(send))


# --- execute: parallel uploads under a bound on bytes in flight --------------------------------------


class _ByteBudget:
    """Blocks an upload until its bytes fit under the bound; one blob larger than it goes alone."""

    def __init__(self, limit: int) -> None:
        self._limit, self._used = limit, 0
        self._cond = threading.Condition()

    def acquire(self, n: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._used == 0 or self._used + n <= self._limit)
            self._used += n

    def release(self, n: int) -> None:
        with self._cond:
            self._used -= n
            self._cond.notify_all()


def _pack_bytes(members: tuple[LocalFile, ...]) -> bytes:
    return b"".join(f.abspath.read_bytes() for f in members)


def _send(store: Store, blob: BlobPlan, budget: _ByteBudget) -> int:
    key = blob_key(blob.record.digest)
    budget.acquire(blob.record.size)
    try:
        if isinstance(blob.source, Path):
            # Re-hash right before upload: a file that changed since the snapshot must not be published.
            if sha256_file(blob.source) != blob.record.digest:
                raise IntegrityError(f"{blob.source} changed while publishing", path=str(blob.source))
            wrote = store.put_file(key, blob.source)
        else:
            data = _pack_bytes(blob.source)
            if hashlib.sha256(data).hexdigest() != blob.record.digest:
                where = str(blob.source[0].abspath.parent)
                raise IntegrityError(f"{where}: files changed while publishing", path=where)
            wrote = store.put_bytes(key, data)
            del data
    finally:
        budget.release(blob.record.size)
    return blob.record.size if wrote else 0


def execute_upload(store: Store, send: list[BlobPlan], *, threads: int | None = None,
                   max_bytes_in_flight: int | None = None) -> tuple[int, int]:
    """Upload the planned blobs; returns (bytes uploaded, blobs another writer created meanwhile)."""
    if not send:
        return 0, 0
    threads = threads or UPLOAD_THREADS
    budget = _ByteBudget(max_bytes_in_flight or MAX_BYTES_IN_FLIGHT)
    uploaded = raced = 0
    # Largest first: the long uploads start early and small ones fill the gaps.
    order = sorted(send, key=lambda b: (-b.record.size, b.record.digest))
    with ThreadPoolExecutor(min(threads, len(order)), thread_name_prefix="ck-upload") as pool:
        for n in pool.map(lambda b: _send(store, b, budget), order):
            uploaded += n
            raced += n == 0
    return uploaded, raced


def upload_files(store: Store, local: list[LocalFile]) -> tuple[list[FileRecord], list[BlobRecord], int, int]:
    """Upload every blob of these files; returns (files, blobs, bytes uploaded, blobs already present)."""
    plan = plan_upload(store, local)
    uploaded, raced = execute_upload(store, plan.send)
    return plan.files, plan.blobs, uploaded, plan.present + raced


def shared_name(root: str, local: list[LocalFile]) -> str | None:
    """Name of a toolchain-shared set: the root plus a digest of its file *names* (not bytes).

    Inductor's precompiled header is named by a hash of its inputs and compiler, but its bytes differ
    between builds; naming the set by paths lets every entry of a toolchain share the first upload.
    """
    paths = [f.path for f in local]
    if not paths:
        return None
    return f"{root}-{canonical.digest(paths)[:16]}"


def commit_manifest(store: Store, manifest: Manifest, signing_key: SigningKey | None) -> tuple[Manifest, bool]:
    """The last step of every publish, once its blobs are in: the signature, then the manifest, written
    once. Returns (the manifest now stored, True if this call wrote it); when another writer won the race,
    its manifest is returned and adopted."""
    data = manifest.to_bytes()
    if signing_key is not None:
        from ..format.signing import publish_signature

        publish_signature(store, signing_key, data)
    if store.put_bytes(manifest.key, data):
        return manifest, True
    existing = Manifest.from_bytes(store.get_bytes(manifest.key), source=manifest.key)
    return existing, False


def publish(store: Store, *, fingerprint: Fingerprint, spec: EntrySpec, roots: Mapping[str, Path],
            include: Callable[[str, str, Path], bool], shared_roots: frozenset[str] = frozenset(),
            build: Mapping[str, Any] | None = None, catalog: Catalog | None = None,
            signing_key: SigningKey | None = None, relocatable_roots: frozenset[str] = frozenset()) -> PublishResult:
    """Publish the entry `spec` built into `roots` (shared roots become their own manifests). The files of
    `relocatable_roots` that name their root's path are rewritten to name a placeholder and marked
    (format/relocate.py: hydrate writes the served dir in); the informative `build` names roots `${root}`."""
    requires: list[str] = []
    uploaded = blobs_up = present = 0
    movable = {k: v for k, v in roots.items() if k in relocatable_roots}
    if movable:
        build = relocate.scrub(build or {}, roots)

    def scan(some: Mapping[str, Path]) -> list[LocalFile]:
        return make_relocatable(scan_roots(some, include), movable) if movable else scan_roots(some, include)

    for root in sorted(shared_roots & roots.keys()):
        local = scan({root: roots[root]})
        name = shared_name(root, local)
        if name is None:
            continue
        requires.append(name)
        if store.exists(manifest_key(fingerprint.id, name)):
            continue
        files, blobs, n, p = upload_files(store, local)
        shared = Manifest(KIND_SHARED, name, fingerprint, tuple(files), tuple(blobs), build=dict(build or {}))
        shared, _ = commit_manifest(store, shared, signing_key)
        if catalog is not None:
            catalog.record(shared, store_url=store.url)
        uploaded, blobs_up, present = uploaded + n, blobs_up + len(blobs) - p, present + p
    entry_roots = {k: v for k, v in roots.items() if k not in shared_roots}
    files, blobs, n, p = upload_files(store, scan(entry_roots))
    manifest = Manifest(KIND_ENTRY, spec.key, fingerprint, tuple(files), tuple(blobs), spec=spec,
                        requires=tuple(requires), build=dict(build or {}))
    manifest, created = commit_manifest(store, manifest, signing_key)
    if catalog is not None:
        catalog.record(manifest, store_url=store.url)
    return PublishResult(manifest, created, uploaded + n, blobs_up + len(blobs) - p, present + p)

"""Publish a built entry: blobs first, then the manifest, then the catalog row.

The manifest is written with an exclusive create, so the first complete build of an entry wins and a
racing worker adopts it; a crash before the manifest leaves only unreferenced blobs (GC removes them),
never a manifest that names missing bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import canonical
from .errors import IntegrityError
from .fingerprint import Fingerprint
from .fsutil import sha256_file
from .manifest import KIND_ENTRY, KIND_SHARED, BlobRecord, FileRecord, Manifest, blob_key, manifest_key
from .snapshot import LocalFile, PendingBlob, iter_blobs, scan_roots
from .spec import EntrySpec
from .stores.base import Store

if TYPE_CHECKING:
    from .catalog import Catalog
    from .signing import SigningKey

UPLOAD_THREADS = 8


@dataclass(frozen=True)
class PublishResult:
    manifest: Manifest
    created: bool            # False: an identical-name manifest already existed (first writer won)
    uploaded_bytes: int
    blobs_uploaded: int
    blobs_present: int


def _upload(store: Store, blob: PendingBlob) -> int:
    key = blob_key(blob.record.digest)
    present = store.size(key)
    if present == blob.record.size:
        return 0
    if present is not None:  # immutable: a bad object under this name can only be deleted, never replaced
        raise IntegrityError(f"{store.url}/{key} is {present} bytes, expected {blob.record.size}",
                             "run `cachekeeper verify --repair`, then prebuild again")
    if isinstance(blob.source, bytes):
        wrote = store.put_bytes(key, blob.source)
    else:
        # Re-hash right before upload: a file that changed since the snapshot must not be published.
        if sha256_file(blob.source) != blob.record.digest:
            raise IntegrityError(f"{blob.source} changed while publishing")
        wrote = store.put_file(key, blob.source)
    return blob.record.size if wrote else 0


def upload_files(store: Store, local: list[LocalFile]) -> tuple[list[FileRecord], list[BlobRecord], int, int]:
    """Upload every blob of these files; returns (files, blobs, bytes uploaded, blobs already present)."""
    files: list[FileRecord] = []
    blobs: dict[str, BlobRecord] = {}
    uploaded = present = 0
    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        futures = []
        for recs, pending in iter_blobs(local):
            files.extend(recs)
            if pending.record.digest not in blobs:
                blobs[pending.record.digest] = pending.record
                futures.append(pool.submit(_upload, store, pending))
        for fut in futures:
            n = fut.result()
            uploaded += n
            present += n == 0
    files.sort(key=lambda f: (f.root, f.path))
    return files, sorted(blobs.values(), key=lambda b: b.digest), uploaded, present


def shared_name(root: str, local: list[LocalFile]) -> str | None:
    """Name of a toolchain-shared set: the root plus a digest of its file *names* (not bytes).

    Inductor's precompiled header is named by a hash of its inputs and compiler, but its bytes differ
    between builds; naming the set by paths lets every entry of a toolchain share the first upload.
    """
    paths = [f.path for f in local]
    if not paths:
        return None
    return f"{root}-{canonical.digest(paths)[:16]}"


def _commit(store: Store, manifest: Manifest, signing_key: SigningKey | None) -> tuple[Manifest, bool]:
    data = manifest.to_bytes()
    if signing_key is not None:
        from .signing import publish_signature

        publish_signature(store, signing_key, data)
    if store.put_bytes(manifest.key, data):
        return manifest, True
    existing = Manifest.from_bytes(store.get_bytes(manifest.key), source=manifest.key)
    return existing, False


def publish(store: Store, *, fingerprint: Fingerprint, spec: EntrySpec, roots: Mapping[str, Path],
            include: Callable[[str, str, Path], bool], shared_roots: frozenset[str] = frozenset(),
            build: Mapping[str, Any] | None = None, catalog: Catalog | None = None,
            signing_key: SigningKey | None = None) -> PublishResult:
    """Publish the entry `spec` built into `roots` (shared roots become their own manifests)."""
    requires: list[str] = []
    uploaded = blobs_up = present = 0
    for root in sorted(shared_roots & roots.keys()):
        local = scan_roots({root: roots[root]}, include)
        name = shared_name(root, local)
        if name is None:
            continue
        requires.append(name)
        if store.exists(manifest_key(fingerprint.id, name)):
            continue
        files, blobs, n, p = upload_files(store, local)
        shared = Manifest(KIND_SHARED, name, fingerprint, tuple(files), tuple(blobs), build=dict(build or {}))
        shared, _ = _commit(store, shared, signing_key)
        if catalog is not None:
            catalog.record(shared, store_url=store.url)
        uploaded, blobs_up, present = uploaded + n, blobs_up + len(blobs) - p, present + p
    entry_roots = {k: v for k, v in roots.items() if k not in shared_roots}
    files, blobs, n, p = upload_files(store, scan_roots(entry_roots, include))
    manifest = Manifest(KIND_ENTRY, spec.key, fingerprint, tuple(files), tuple(blobs), spec=spec,
                        requires=tuple(requires), build=dict(build or {}))
    manifest, created = _commit(store, manifest, signing_key)
    if catalog is not None:
        catalog.record(manifest, store_url=store.url)
    return PublishResult(manifest, created, uploaded + n, blobs_up + len(blobs) - p, present + p)

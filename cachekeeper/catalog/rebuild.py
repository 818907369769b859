"""Read every manifest a store holds, to rebuild the catalog from the store (the source of truth).

Objects that are not valid manifests are reported with their key and a reason, never raised: one bad
object must not stop a rebuild. Store failures other than a vanished object do raise, because a
partial listing would make the rebuild drop rows that are fine.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import ManifestError, ObjectNotFound, UnsafePath
from ..manifest import Manifest, manifest_prefix
from ..stores.base import Store
from .models import KINDS

FETCH_THREADS = 8   # manifests are small; on S3/GCS the latency, not the bandwidth, is the cost


@dataclass(frozen=True)
class Scan:
    manifests: dict[str, Manifest]          # digest -> manifest
    invalid: tuple[tuple[str, str], ...]    # (key, why)


def problem(manifest: Manifest) -> str | None:
    """Why the catalog cannot hold this manifest, or None. (`Manifest.validate` does not check the kind.)"""
    if manifest.kind not in KINDS:
        return f"unknown manifest kind {manifest.kind!r}"
    return None


def read(store: Store, key: str) -> Manifest | str | None:
    """The manifest stored at `key`, the reason it is not a usable one, or None if it vanished."""
    try:
        data = store.get_bytes(key)
    except ObjectNotFound:
        return None
    try:
        manifest = Manifest.from_bytes(data, source=key)
    except (ManifestError, UnsafePath) as exc:
        return exc.message.removeprefix(f"{key}: ")
    if manifest.key != key:
        return f"holds the manifest of {manifest.key}"
    if hashlib.sha256(data).hexdigest() != manifest.digest:
        # A lockfile pins sha256(stored bytes); non-canonical bytes would never match the recorded digest.
        return "bytes are not canonical JSON (their sha256 differs from the manifest digest)"
    return problem(manifest) or manifest


def scan(store: Store) -> Scan:
    keys = sorted(store.list(manifest_prefix()))
    with ThreadPoolExecutor(FETCH_THREADS) as pool:
        results = list(pool.map(lambda key: read(store, key), keys))
    manifests: dict[str, Manifest] = {}
    invalid: list[tuple[str, str]] = []
    for key, result in zip(keys, results, strict=True):
        if isinstance(result, Manifest):
            manifests[result.digest] = result
        elif result is not None:
            invalid.append((key, result))
    return Scan(manifests, tuple(invalid))

"""Check the store: every manifest parses and every blob it names exists at the right size
(`deep`: and hashes to its digest). Problems are returned, not raised, so one pass reports them all."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import CachekeeperError
from .manifest import Manifest, blob_key
from .stores.base import Store


@dataclass(frozen=True)
class Problem:
    key: str                 # the manifest
    what: str
    blob: str | None = None  # the blob at fault, if any


def repair(store: Store, problems: list[Problem]) -> list[str]:
    """Delete the bad blobs and the manifests that name them (signatures too), so prebuild rebuilds those
    entries from scratch: objects are immutable, so a corrupt blob would otherwise never be replaced."""
    from .manifest import Manifest
    from .signing import signature_key

    removed: list[str] = []
    for blob in sorted({p.blob for p in problems if p.blob}):
        store.delete(blob_key(blob))
        removed.append(blob_key(blob))
    for key in sorted({p.key for p in problems}):
        with contextlib.suppress(CachekeeperError):  # unreadable manifest: no digest to find its signature by
            store.delete(signature_key(Manifest.from_bytes(store.get_bytes(key)).digest))
        store.delete(key)
        removed.append(key)
    return removed


def verify_store(store: Store, manifests: dict[str, Manifest | None], *, deep: bool = False) -> Iterator[Problem]:
    checked: dict[str, bool] = {}
    for key, m in sorted(manifests.items()):
        if m is None:
            yield Problem(key, "manifest unreadable or of an unknown schema")
            continue
        for b in m.blobs:
            if b.digest not in checked:
                checked[b.digest] = _blob_ok(store, b.digest, b.size, deep)
            if not checked[b.digest]:
                yield Problem(key, f"blob {b.digest[:12]}… missing, truncated or corrupt", b.digest)


def _blob_ok(store: Store, digest: str, size: int, deep: bool) -> bool:
    if store.size(blob_key(digest)) != size:
        return False
    if not deep:
        return True
    h = hashlib.sha256()

    class _W:
        def write(self, data: bytes) -> int:
            h.update(data)
            return len(data)

    store.download(blob_key(digest), _W())  # type: ignore[arg-type]
    return h.hexdigest() == digest

"""Check the store: every manifest parses and every blob it names exists at the right size
(`deep`: and hashes to its digest). Problems are returned, not raised, so one pass reports them all.

Sizes come from the inventory's blob listing (one listing call per thousand blobs, not a HEAD per blob);
only `deep` reads blobs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from ..format.layout import blob_key, signature_key
from ..stores.base import Store
from ..stores.inventory import Inventory


@dataclass(frozen=True)
class Problem:
    key: str                 # the manifest
    what: str
    blob: str | None = None  # the blob at fault, if any


def repair(store: Store, inventory: Inventory, problems: list[Problem]) -> list[str]:
    """Delete the bad blobs and the manifests that name them (signatures too), so prebuild rebuilds those
    entries from scratch: objects are immutable, so a corrupt blob would otherwise never be replaced."""
    removed: list[str] = []
    for blob in sorted({p.blob for p in problems if p.blob}):
        store.delete(blob_key(blob))
        removed.append(blob_key(blob))
    for key in sorted({p.key for p in problems}):
        manifest = inventory.manifests.get(key)   # an unreadable one has no digest to find its signature by
        if manifest is not None:
            store.delete(signature_key(manifest.digest))
        store.delete(key)
        removed.append(key)
    return removed


def verify_store(store: Store, inventory: Inventory, *, deep: bool = False) -> Iterator[Problem]:
    sizes = inventory.blob_sizes()
    checked: dict[str, bool] = {}
    for key in sorted(inventory.manifests.keys() | inventory.unreadable.keys()):
        m = inventory.manifests.get(key)
        if m is None:
            yield Problem(key, f"manifest unreadable: {inventory.unreadable[key]}")
            continue
        for b in m.blobs:
            if b.digest not in checked:
                checked[b.digest] = sizes.get(b.digest) == b.size and (not deep or _hashes_to(store, b.digest))
            if not checked[b.digest]:
                yield Problem(key, f"blob {b.digest[:12]}… missing, truncated or corrupt", b.digest)


def _hashes_to(store: Store, digest: str) -> bool:
    h = hashlib.sha256()

    class _W:
        def write(self, data: bytes) -> int:
            h.update(data)
            return len(data)

    store.download(blob_key(digest), _W())  # type: ignore[arg-type]
    return h.hexdigest() == digest

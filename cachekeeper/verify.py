"""Check the store: every manifest parses and every blob it names exists at the right size
(`deep`: and hashes to its digest). Problems are returned, not raised, so one pass reports them all."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from .manifest import Manifest, blob_key
from .stores.base import Store


@dataclass(frozen=True)
class Problem:
    key: str
    what: str


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
                yield Problem(key, f"blob {b.digest[:12]}… missing, truncated or corrupt")


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

"""Garbage collection of the store: plan (pure) then run.

Unreferenced blobs and signatures are removed once they are older than a grace window (`min_age`):
a publisher writes blobs, then the signature, then the manifest, so a young unreferenced object may
belong to a manifest that is about to land. Manifests are removed only for toolchains named with
`drop` (e.g. an old compiler), and their signatures with them. Debris of killed publishers (temp files
of the file store, unfinished S3 multipart uploads) goes once it is older than the same window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..format.layout import blob_key, signature_key
from ..stores.base import Debris, Store
from ..stores.inventory import Inventory

DEFAULT_MIN_AGE = 3600.0   # longer than any publish takes between its first blob and its manifest


@dataclass
class GcPlan:
    delete_manifests: list[str] = field(default_factory=list)
    delete_blobs: list[str] = field(default_factory=list)
    delete_signatures: list[str] = field(default_factory=list)
    keep_blobs: int = 0
    young: int = 0                                         # unreferenced, but inside the grace window
    unreadable: list[str] = field(default_factory=list)   # reported, never deleted automatically
    delete_debris: list[Debris] = field(default_factory=list)
    young_debris: int = 0                                  # a publish may still be writing it


def plan_gc(inventory: Inventory, drop: set[str], *, min_age: float = DEFAULT_MIN_AGE,
            now: float | None = None) -> GcPlan:
    """Pure: what to delete from the store `inventory` describes. `drop`: fingerprint ids to remove.
    Misfiled manifests (`Inventory.misfiled`) count like the others: their blobs stay."""
    cutoff = (time.time() if now is None else now) - min_age
    plan = GcPlan(unreadable=sorted(inventory.unreadable))
    referenced: set[str] = set()
    live_signatures: set[str] = set()
    dropped_signatures: set[str] = set()
    for key, m in sorted(inventory.manifests.items()):
        if m.fingerprint.id in drop:
            plan.delete_manifests.append(key)
            dropped_signatures.add(signature_key(m.digest))
        else:
            referenced.update(blob_key(b.digest) for b in m.blobs)
            live_signatures.add(signature_key(m.digest))
    for sig in sorted(inventory.signatures, key=lambda o: o.key):
        if sig.key in dropped_signatures or (sig.key not in live_signatures and sig.mtime <= cutoff):
            plan.delete_signatures.append(sig.key)
        elif sig.key not in live_signatures:
            plan.young += 1
    for blob in sorted(inventory.blobs, key=lambda o: o.key):
        if blob.key in referenced:
            plan.keep_blobs += 1
        elif blob.mtime > cutoff:
            plan.young += 1
        else:
            plan.delete_blobs.append(blob.key)
    for item in sorted(inventory.debris, key=lambda d: (d.key, d.upload_id)):
        if item.mtime > cutoff:
            plan.young_debris += 1
        else:
            plan.delete_debris.append(item)
    return plan


def run_gc(store: Store, plan: GcPlan) -> None:
    # Manifests first: a reader never sees a manifest whose blobs are already gone.
    for key in plan.delete_manifests + plan.delete_signatures:
        store.delete(key)
    for key in plan.delete_blobs:
        store.delete(key)
    for item in plan.delete_debris:
        store.delete_debris(item)

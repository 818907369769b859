"""Garbage collection of the store: plan (pure) then run.

Unreferenced blobs are removed; manifests are removed only for toolchains named with --drop (e.g. an old
compiler). Blobs are written before their manifest, so a prebuild running *during* a GC could lose
fresh blobs: run GC when no prebuild is publishing to the same store (documented in the README).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .errors import ManifestError
from .manifest import Manifest, blob_key
from .signing import signature_key
from .stores.base import Store


@dataclass
class GcPlan:
    delete_manifests: list[str] = field(default_factory=list)
    delete_blobs: list[str] = field(default_factory=list)
    delete_signatures: list[str] = field(default_factory=list)
    keep_blobs: int = 0
    unreadable: list[str] = field(default_factory=list)   # reported, never deleted automatically


def plan_gc(manifests: dict[str, Manifest | None], blob_keys: Iterable[str], drop: set[str],
            signature_keys: Iterable[str] = ()) -> GcPlan:
    """`manifests`: key -> parsed manifest (None if unreadable). `drop`: fingerprint ids to remove.
    A signature goes with its manifest (it is keyed by the manifest's digest)."""
    plan = GcPlan()
    referenced: set[str] = set()
    live_signatures = {signature_key(m.digest) for m in manifests.values() if m is not None}
    for key, m in sorted(manifests.items()):
        if m is None:
            plan.unreadable.append(key)
            continue
        if m.fingerprint.id in drop:
            plan.delete_manifests.append(key)
            live_signatures.discard(signature_key(m.digest))
            continue
        referenced.update(blob_key(b.digest) for b in m.blobs)
    plan.delete_signatures = sorted(k for k in signature_keys if k not in live_signatures)
    for key in sorted(blob_keys):
        if key in referenced:
            plan.keep_blobs += 1
        else:
            plan.delete_blobs.append(key)
    return plan


def read_manifests(store: Store) -> dict[str, Manifest | None]:
    out: dict[str, Manifest | None] = {}
    for key in store.list("manifests/"):
        if not key.endswith(".json"):
            continue
        try:
            out[key] = Manifest.from_bytes(store.get_bytes(key), source=key)
        except ManifestError:
            out[key] = None
    return out


def run_gc(store: Store, plan: GcPlan) -> None:
    # Manifests first: a reader never sees a manifest whose blobs are already gone.
    for key in plan.delete_manifests + plan.delete_signatures:
        store.delete(key)
    for key in plan.delete_blobs:
        store.delete(key)

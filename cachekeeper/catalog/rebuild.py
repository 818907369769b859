"""Which of a store's manifests the catalog can index, to rebuild the catalog from the store (the source
of truth), from one inventory scan (`cachekeeper.stores.inventory`).

Objects that are not valid manifests are reported with their key and a reason, never raised: one bad
object must not stop a rebuild. Store failures other than a vanished object do raise, because a
partial listing would make the rebuild drop rows that are fine.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..format.manifest import Manifest
from ..stores.base import Store
from ..stores.inventory import Inventory
from ..stores.inventory import scan as scan_store
from .models import KINDS

NOT_A_MANIFEST_KEY = "not a manifest key (manifests/<fingerprint>/<name>.json)"


@dataclass(frozen=True)
class Scan:
    manifests: dict[str, Manifest]          # digest -> manifest
    invalid: tuple[tuple[str, str], ...]    # (key, why)


def problem(manifest: Manifest) -> str | None:
    """Why the catalog cannot hold this manifest, or None. (`Manifest.validate` does not check the kind.)"""
    if manifest.kind not in KINDS:
        return f"unknown manifest kind {manifest.kind!r}"
    return None


def indexable(inventory: Inventory) -> Scan:
    """Pure: the manifests the catalog can hold, by digest, and every other object under manifests/ with why."""
    manifests: dict[str, Manifest] = {}
    invalid = inventory.unreadable | inventory.misfiled | dict.fromkeys(inventory.strays, NOT_A_MANIFEST_KEY)
    for key, manifest in inventory.filed().items():
        why = problem(manifest)
        if why is None:
            manifests[manifest.digest] = manifest
        else:
            invalid[key] = why
    return Scan(manifests, tuple(sorted(invalid.items())))


def scan(store: Store) -> Scan:
    return indexable(scan_store(store, objects=False, debris=False))

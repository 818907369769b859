"""Presence: for one toolchain and a set of wanted entries, which are built, missing, or held (a live
worker is building them right now).

Prebuild, `coverage`, `lock`, `hydrate` and `explain` all ask this question. The answer is one pure
function, `plan_presence`, over what was looked up; the look-ups are thin functions at the edge:

    catalog_digests / stored_entries / live_holders  ─▶  plan_presence (pure)  ─▶  Presence

The catalog answers without a store request; the store (one listing per toolchain, never a HEAD per
entry) answers when there is no catalog or when the caller asks to verify against it. When both were
read, the store wins (the bucket is the source of truth) and the plan says which index rows to repair.
Light on purpose: hydrate imports this, so it imports neither SQLAlchemy nor a cloud SDK.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .stores.manifests import manifest_keys

if TYPE_CHECKING:
    from .catalog import Catalog
    from .stores.base import Store


@dataclass(frozen=True)
class Presence:
    """Where each wanted entry of one toolchain stands. `built` and `missing` split the wanted keys (in
    their order); `held` is the part of `missing` a live worker is building."""

    fingerprint_id: str
    built: tuple[str, ...]
    missing: tuple[str, ...]
    held: Mapping[str, str] = field(default_factory=dict)        # key -> worker holding its lease
    unindexed: tuple[str, ...] = ()       # in the store, not in the catalog: record them
    stale: Mapping[str, str] = field(default_factory=dict)       # key -> digest of an index row whose manifest is gone

    def is_built(self, key: str) -> bool:
        return key in self._built

    @functools.cached_property
    def _built(self) -> frozenset[str]:   # prebuild asks per entry of a 10k-entry plan: a set, built once
        return frozenset(self.built)


def plan_presence(fingerprint_id: str, keys: Iterable[str], *, indexed: Mapping[str, str] | None = None,
                  stored: Collection[str] | None = None, held: Mapping[str, str] | None = None) -> Presence:
    """Pure. `indexed`: key -> digest the catalog has; `stored`: keys whose manifest the store has (None:
    not asked); `held`: key -> worker with a live lease. With `stored`, the store decides what is built."""
    if indexed is None and stored is None:
        raise ValueError("plan_presence needs a catalog answer (indexed) or a store answer (stored)")
    index = indexed or {}
    built: list[str] = []
    missing: list[str] = []
    unindexed: list[str] = []
    stale: dict[str, str] = {}
    for key in dict.fromkeys(keys):
        present = key in stored if stored is not None else key in index
        (built if present else missing).append(key)
        if stored is not None and indexed is not None:
            if present and key not in index:
                unindexed.append(key)
            elif not present and key in index:
                stale[key] = index[key]
    lacking = set(missing)
    holders = {k: w for k, w in (held or {}).items() if k in lacking}
    return Presence(fingerprint_id, tuple(built), tuple(missing), holders, tuple(unindexed), stale)


# --- the look-ups (I/O) ------------------------------------------------------------------------------


def stored_entries(store: Store, fingerprint_id: str) -> set[str]:
    """Names of the toolchain's manifests in the store: one listing, not a HEAD per entry. Captured sets
    (one level deeper) are not entries and are left out."""
    return {mk.name for mk in manifest_keys(store, fingerprint_id, captured=False)}


def live_holders(catalog: Catalog, fingerprint_id: str, keys: Iterable[str],
                 now: dt.datetime | None = None) -> dict[str, str]:
    """key -> worker, for queue jobs running under a lease that has not run out."""
    now = now or dt.datetime.now(dt.UTC)
    return {k: j.worker or "?" for k, j in catalog.job_states(fingerprint_id, keys).items()
            if j.status == "running" and j.lease_expires_at is not None and j.lease_expires_at >= now}


def look_up(fingerprint_id: str, keys: Iterable[str], *, catalog: Catalog | None = None, store: Store | None = None,
            verify_store: bool = False, holders: bool = False) -> Presence:
    """Presence from the catalog (no store request), or from the store when there is no catalog or
    `verify_store` asks for both. `holders`: also ask the catalog's queue who is building what."""
    wanted = list(dict.fromkeys(keys))
    if catalog is None and store is None:
        raise ValueError("look_up needs a catalog or a store")
    indexed = catalog.digests(fingerprint_id, wanted) if catalog is not None else None
    stored = None
    if catalog is None or verify_store:
        assert store is not None, "verify_store needs a store"
        stored = stored_entries(store, fingerprint_id)
    held = live_holders(catalog, fingerprint_id, wanted) if holders and catalog is not None else None
    return plan_presence(fingerprint_id, wanted, indexed=indexed, stored=stored, held=held)


def captured_sets(fingerprint_id: str, *, catalog: Catalog | None = None, store: Store | None = None) -> int:
    """How many captured sets (runtime compiles written back) the toolchain has, catalog first."""
    from .format.manifest import KIND_CAPTURED

    if catalog is not None:
        return len(catalog.find(fingerprint_id=fingerprint_id, kind=KIND_CAPTURED))
    if store is None:
        raise ValueError("captured_sets needs a catalog or a store")
    return len(manifest_keys(store, fingerprint_id, captured=True))

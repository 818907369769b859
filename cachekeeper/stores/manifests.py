"""Which manifests a store holds, by key alone (no manifest is read): the boot path lists one
toolchain's, `show` and `explain` match a prefix. The keys' shapes are format/layout.py's."""

from __future__ import annotations

from ..format.layout import ManifestKey, listing_prefix, select_manifest_keys
from .base import Store


def manifest_keys(store: Store, fingerprint_id: str | None = None, *,
                  captured: bool | None = None) -> list[ManifestKey]:
    """The manifest keys `store` holds (of one toolchain), sorted; see `layout.select_manifest_keys`."""
    return select_manifest_keys(store.list(listing_prefix(fingerprint_id, captured)), captured)

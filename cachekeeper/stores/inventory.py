"""What a store holds, in one scan: gc, verify, catalog rebuild and show learn the bucket from here.

    manifests/   listed; every `.json` object read and parsed (in parallel: on S3/GCS latency is the cost)
                 - parses: `manifests` (key -> manifest); if it is not the manifest its key names, or its
                   bytes are not canonical, also `misfiled` (key -> why): usable by nobody, but gc keeps
                   the blobs it names, because deleting on a guess is the one mistake gc cannot undo
                 - does not parse: `unreadable` (key -> why); any other object there: `strays`
    signatures/  listed with sizes and modification times (gc's grace window reads them)
    blobs/       the same
    debris       what killed publishers left behind (`Store.list_debris`)

Manifests are listed first: a publisher writes blobs before its manifest, so every blob a listed manifest
names is in the later blob listing unless it is really gone. An object that vanishes between listing and
reading (a concurrent gc) is left out; every other store failure raises, because a partial inventory would
make gc delete referenced blobs or a rebuild drop rows that are fine. Planners (`gc.plan_gc`, `verify`)
take an Inventory and do no I/O of their own.

Listing keys without reading them (the boot path, `show`) is `layout.manifest_keys`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ..errors import ManifestError, ObjectNotFound, UnsafePath
from ..format.layout import (
    BLOBS,
    MANIFEST_SUFFIX,
    SIGNATURES,
    ManifestKey,
    manifest_prefix,
    parse_blob_key,
    parse_manifest_key,
)
from ..format.manifest import Manifest
from .base import Debris, ObjectInfo, Store

FETCH_THREADS = 8   # manifests are small; on S3/GCS the latency, not the bandwidth, is the cost


@dataclass(frozen=True)
class Inventory:
    manifests: dict[str, Manifest] = field(default_factory=dict)   # object key -> parsed manifest
    misfiled: dict[str, str] = field(default_factory=dict)         # key -> why it is not the manifest it names
    unreadable: dict[str, str] = field(default_factory=dict)       # key -> why it is no manifest
    strays: tuple[str, ...] = ()                                   # under manifests/, not a `.json` object
    blobs: tuple[ObjectInfo, ...] = ()
    signatures: tuple[ObjectInfo, ...] = ()
    debris: tuple[Debris, ...] = ()

    def filed(self) -> dict[str, Manifest]:
        """The manifests that are what their key names, with the bytes a lockfile can pin."""
        return {k: m for k, m in self.manifests.items() if k not in self.misfiled}

    def blob_sizes(self) -> dict[str, int]:
        """Digest -> stored size of every object at a blob key."""
        return {d: o.size for o in self.blobs if (d := parse_blob_key(o.key)) is not None}


def scan(store: Store, *, objects: bool = True, debris: bool = True) -> Inventory:
    """The store's manifests, and with `objects` its blobs and signatures, with `debris` its debris."""
    from concurrent.futures import ThreadPoolExecutor

    listed = sorted(store.list(manifest_prefix()))
    # Every `.json` is read, not only well-formed manifest keys: a misfiled manifest still names blobs
    # that gc must keep, and rebuild reports it.
    keys = [k for k in listed if k.endswith(MANIFEST_SUFFIX)]
    with ThreadPoolExecutor(FETCH_THREADS) as pool:
        results = list(pool.map(lambda key: read_manifest(store, key), keys))
    manifests: dict[str, Manifest] = {}
    misfiled: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    for key, result in zip(keys, results, strict=True):
        if isinstance(result, str):
            unreadable[key] = result
        elif result is not None:
            manifests[key], why = result
            if why is not None:
                misfiled[key] = why
    return Inventory(
        manifests, misfiled, unreadable, tuple(k for k in listed if not k.endswith(MANIFEST_SUFFIX)),
        blobs=_listed(store, BLOBS) if objects else (),
        signatures=_listed(store, SIGNATURES) if objects else (),
        debris=tuple(store.list_debris()) if debris else ())


def _listed(store: Store, prefix: str) -> tuple[ObjectInfo, ...]:
    return tuple(sorted(store.list_info(prefix), key=lambda o: o.key))


def read_manifest(store: Store, key: str) -> tuple[Manifest, str | None] | str | None:
    """(the manifest at `key`, why it is misfiled or None), the reason it is no manifest, or None if it vanished."""
    try:
        data = store.get_bytes(key)
    except ObjectNotFound:
        return None
    try:
        manifest = Manifest.from_bytes(data, source=None)   # bare reasons: the key is reported beside them
    except (ManifestError, UnsafePath) as exc:
        return exc.message
    return manifest, misfiled(key, data, manifest)


def misfiled(key: str, data: bytes, manifest: Manifest) -> str | None:
    """Why a valid manifest is not the object its key names, or None."""
    if parse_manifest_key(key) != ManifestKey(manifest.fingerprint.id, manifest.name):
        return f"holds the manifest of {manifest.key}"
    if hashlib.sha256(data).hexdigest() != manifest.digest:
        # A lockfile pins sha256(stored bytes); non-canonical bytes would never match the recorded digest.
        return "bytes are not canonical JSON (their sha256 differs from the manifest digest)"
    return None

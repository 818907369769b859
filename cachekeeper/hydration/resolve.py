"""Which manifests a host wants: by entry names (config or lockfile) or by listing its toolchain's dir; and
the lockfile that pins them (`lock` writes it, `hydrate --lockfile` reads it).

All of it works from the store alone: the boot path never needs the catalog.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import (
    IntegrityError,
    LockfileError,
    ManifestError,
    NothingToHydrate,
    ObjectNotFound,
    ToolchainMismatch,
    UnsafePath,
)
from ..format.fingerprint import Fingerprint
from ..format.layout import is_captured_name, manifest_key
from ..format.manifest import KIND_CAPTURED, KIND_ENTRY, KIND_SHARED, MAX_MANIFEST_BYTES, Manifest
from ..fs.atomic import atomic_write_bytes
from ..fs.paths import NotRegular, open_regular
from ..presence import look_up
from ..stores.base import Store
from ..stores.manifests import manifest_keys

if TYPE_CHECKING:
    from ..backends.host import HostToolchain
    from ..config import Config
    from ..format.signing import PublicKey
    from ..stores.reader import Deadline

LOCK_VERSION = 1


@dataclass(frozen=True)
class Pin:
    name: str
    digest: str | None = None      # set when a lockfile pins exact bytes
    kind: str | None = None        # the manifest kind asked for ("entry", "shared"), checked when set


def _get(store: Store, fp_id: str, pin: Pin, trusted: tuple[PublicKey, ...],
         deadline: Deadline | None = None) -> Manifest | None:
    from ..stores.reader import read_bytes

    key = manifest_key(fp_id, pin.name)
    try:
        data = read_bytes(store, key, limit=MAX_MANIFEST_BYTES, deadline=deadline)
    except ObjectNotFound:
        return None
    if pin.digest and hashlib.sha256(data).hexdigest() != pin.digest:
        raise IntegrityError(f"{store.url}/{key} does not match the digest pinned in the lockfile",
                             url=store.url, key=key)
    if trusted:
        from ..format.signing import BUILDER, CAPTURE, require_signature

        # Captured sets (serving hosts wrote them) only from capture keys, all else only from builder keys;
        # check_identity below binds the signed name, so the role chosen by name is the manifest's.
        role = CAPTURE if is_captured_name(pin.name) else BUILDER
        require_signature(store, data, trusted, f"{store.url}/{key}", role)
    m = Manifest.from_bytes(data, source=f"{store.url}/{key}")
    check_identity(m, pin, f"{store.url}/{key}")
    return m


def check_identity(m: Manifest, pin: Pin, source: str) -> None:
    """The object at a key must be the manifest that key names: a valid (even signed) manifest of
    another entry, or of another kind, planted there is refused, never placed as if it were the one
    asked for. The fingerprint id is checked by `require_toolchain` (a mismatch there says how the
    toolchains differ); a lockfile's digest binds all of it."""
    if m.name != pin.name:
        raise IntegrityError(f"{source} holds manifest {m.name}, not {pin.name} (substituted)", key=m.key)
    if pin.kind is not None and m.kind != pin.kind:
        raise IntegrityError(f"{source} holds a {m.kind} manifest where a {pin.kind} manifest was asked for",
                             key=m.key)


def fetch_manifests(store: Store, fingerprint: Fingerprint, pins: Iterable[Pin],
                    trusted: tuple[PublicKey, ...] = (), *,
                    deadline: Deadline | None = None) -> tuple[list[Manifest], list[str]]:
    """(found, missing names); manifests of another toolchain are refused, never used."""
    from concurrent.futures import ThreadPoolExecutor  # not on the no-op boot path

    pins = list(pins)
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda p: _get(store, fingerprint.id, p, trusted, deadline), pins))
    found: list[Manifest] = []
    missing: list[str] = []
    for pin, m in zip(pins, results, strict=True):
        if m is None:
            missing.append(pin.name)
            continue
        require_toolchain(m, fingerprint)
        found.append(m)
    return found, missing


def require_toolchain(m: Manifest, local: Fingerprint) -> None:
    if m.fingerprint.id != local.id:
        diff = ", ".join(f"{k}: {a} (artifact) vs {b} (host)" for k, (a, b) in m.fingerprint.diff(local).items())
        raise ToolchainMismatch(f"manifest {m.name} was built for another toolchain ({diff or m.fingerprint.id})",
                                key=m.key, fingerprint=m.fingerprint.id)


def list_entries(store: Store, fingerprint: Fingerprint, models: set[str] | None = None,
                 trusted: tuple[PublicKey, ...] = (), *, deadline: Deadline | None = None) -> list[Manifest]:
    """Every entry manifest published for this toolchain (optionally only some models)."""
    names = [mk.name for mk in manifest_keys(store, fingerprint.id, captured=False)]  # captured: list_captured
    found, _ = fetch_manifests(store, fingerprint, [Pin(n) for n in names], trusted, deadline=deadline)
    entries = [m for m in found if m.kind == KIND_ENTRY]
    if models:
        entries = [m for m in entries if m.spec and m.spec.model in models]
    return sorted(entries, key=lambda m: m.name)


def with_shared(store: Store, fingerprint: Fingerprint, manifests: list[Manifest],
                trusted: tuple[PublicKey, ...] = (), *, captured: bool = True,
                deadline: Deadline | None = None) -> list[Manifest]:
    """Add the toolchain-shared manifests the entries require (a missing one is a miss, not an error),
    then (with `captured`) the captured sets that extended any of them (runtime compiles written back)."""
    have = {m.name for m in manifests}
    needed = sorted({r for m in manifests for r in m.requires} - have)
    shared, _ = fetch_manifests(store, fingerprint, [Pin(n, kind=KIND_SHARED) for n in needed], trusted,
                                deadline=deadline)
    if not captured:
        return manifests + shared
    return manifests + shared + [m for m in list_captured(store, fingerprint, have, trusted, deadline=deadline)
                                 if m.name not in have]


def list_captured(store: Store, fingerprint: Fingerprint, extends: set[str],
                  trusted: tuple[PublicKey, ...] = (), *, deadline: Deadline | None = None) -> list[Manifest]:
    """Captured sets of this toolchain whose host had hydrated any of `extends`. They come after the
    prebuilt manifests (a path both name keeps the prebuilt bytes), and one that is unreadable, of
    another toolchain or not signed by a trusted key is skipped: a miss, never a failed boot."""
    from concurrent.futures import ThreadPoolExecutor  # not on the no-op boot path

    names = [mk.name for mk in manifest_keys(store, fingerprint.id, captured=True)]

    def get(name: str) -> Manifest | None:
        try:
            return _get(store, fingerprint.id, Pin(name, kind=KIND_CAPTURED), trusted, deadline)
        except (IntegrityError, ManifestError, UnsafePath):
            return None

    with ThreadPoolExecutor(16) as pool:
        found = [m for m in pool.map(get, names) if m is not None]
    return [m for m in found if m.kind == KIND_CAPTURED and m.fingerprint.id == fingerprint.id
            and extends & set((m.provenance or {}).get("extends", ()))]


def other_toolchains(store: Store, backend: str, local: Fingerprint, limit: int = 3) -> list[str]:
    """For a miss: which published toolchains of this backend exist, and how each differs from this host."""
    first: dict[str, str] = {}   # one manifest key per other toolchain: any manifest names its fingerprint
    for mk in manifest_keys(store):
        if mk.fingerprint_id != local.id:
            first.setdefault(mk.fingerprint_id, mk.key)
    lines: list[str] = []
    for fp_id, key in sorted(first.items()):
        try:
            m = Manifest.from_bytes(store.get_bytes(key), source=key)
        except (ManifestError, UnsafePath, ObjectNotFound):
            continue
        if m.fingerprint.backend != backend:
            continue
        diff = ", ".join(f"{k}={a!r} (host {b!r})" for k, (a, b) in m.fingerprint.diff(local).items())
        lines.append(f"{fp_id}: {diff}")
        if len(lines) >= limit:
            break
    return lines


# --- lockfiles ---------------------------------------------------------------------------------------


def write_lockfile(path: Path, backend: str, fingerprint: Fingerprint, manifests: list[Manifest],
                   store_url: str | None = None) -> None:
    """`store`: the store the pins were read from (optional in version 1: readers that predate it ignore it),
    so `hydrate --lockfile` reads them from there unless told otherwise."""
    doc: dict[str, object] = {"version": LOCK_VERSION, "backend": backend, "fingerprint_id": fingerprint.id,
                              "manifests": [{"name": m.name, "digest": m.digest} for m in manifests]}
    if store_url:
        doc["store"] = store_url
    atomic_write_bytes(path, json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n")


@dataclass(frozen=True)
class Locked:
    """What `lock` pinned: `pinned` manifests of the config's entries; `not_built` entries had none."""

    pinned: int
    not_built: int


def lock_entries(path: Path, config: Config, toolchain: HostToolchain, store: Store,
                 models: Collection[str] | None = None) -> Locked:
    """Pin the exact manifests `toolchain` would hydrate for the config's entries (optionally of `models`
    only), with the shared manifests they require, in the lockfile at `path`. One store listing says what
    is built; only those manifests are read (no GET that would 404). Nothing built is NothingToHydrate."""
    fp = toolchain.fingerprint
    keys = [e.spec.key for e in config.entries({toolchain.name}, set(models) if models else None)]
    presence = look_up(fp.id, keys, store=store)
    found, gone = fetch_manifests(store, fp, [Pin(k) for k in presence.built])
    if not found:
        raise NothingToHydrate(f"{store.url} has no entries of this config for toolchain {fp.id}",
                               url=store.url, fingerprint=fp.id)
    write_lockfile(path, toolchain.name, fp, with_shared(store, fp, found), store.url)
    return Locked(pinned=len(found), not_built=len(presence.missing) + len(gone))


MAX_LOCKFILE_BYTES = 64 << 20   # a lockfile of 100k pins is ~15 MB; more is not a lockfile
_DIGEST = re.compile(r"[0-9a-f]{64}")


def read_lockfile(path: Path) -> tuple[str, str, list[Pin]]:
    """(backend, fingerprint id, pins). Every problem is one LockfileError naming the lockfile: a lockfile
    may be old, cut short or written by hand, and its names become store keys."""
    backend, fp, pins, _ = _lockfile(path)
    return backend, fp, pins


def lockfile_store(path: Path) -> str | None:
    """The store a lockfile's pins were read from (`lock` records it), or None (older lockfiles)."""
    return _lockfile(path)[3]


def _lockfile(path: Path) -> tuple[str, str, list[Pin], str | None]:
    from .state import safe_rel

    def bad(why: str) -> LockfileError:
        return LockfileError(f"lockfile {path} is malformed or corrupt: {why}", path=str(path))

    try:   # a symlink is followed (a ConfigMap mount is one); a FIFO or device never blocks the read
        with open_regular(path, follow=True) as f:
            raw = f.read(MAX_LOCKFILE_BYTES + 1)
    except FileNotFoundError:
        raise LockfileError(f"lockfile {path} does not exist", path=str(path)) from None
    except NotRegular as exc:
        raise LockfileError(f"lockfile {path} is {exc}", path=str(path)) from None
    except OSError as exc:
        raise LockfileError(f"cannot read lockfile {path}: {exc.strerror or exc}", path=str(path)) from None
    if len(raw) > MAX_LOCKFILE_BYTES:
        raise bad(f"larger than {MAX_LOCKFILE_BYTES >> 20} MiB")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise bad(f"not JSON ({str(exc).splitlines()[0][:80]})") from None
    if not isinstance(doc, dict):
        raise bad(f"a JSON {type(doc).__name__}, not an object")
    if doc.get("version") != LOCK_VERSION or isinstance(doc.get("version"), bool):
        raise LockfileError(f"lockfile {path} has version {str(doc.get('version'))[:40]!r}; this release reads "
                            f"version {LOCK_VERSION}", path=str(path))
    backend, fp, manifests, store = (doc.get(k) for k in ("backend", "fingerprint_id", "manifests", "store"))
    if not isinstance(backend, str) or not backend or not isinstance(fp, str) or not _HEX16.fullmatch(fp):
        raise bad("backend and fingerprint_id must name a toolchain")
    if not isinstance(manifests, list) or not all(
            isinstance(m, dict) and isinstance(m.get("name"), str) and safe_rel(m["name"])
            and isinstance(m.get("digest"), str) and _DIGEST.fullmatch(m["digest"]) for m in manifests):
        raise bad("`manifests` must be a list of {name, digest (sha256 hex)}")
    if not manifests:
        raise LockfileError(f"lockfile {path} pins no manifests (nothing was built for toolchain {fp} when it "
                            "was made)", "build the config's entries for this toolchain first, then make the "
                            "lockfile again", path=str(path), fingerprint=fp)
    if store is not None and not isinstance(store, str):
        raise bad("`store` must be a URL")
    return backend, fp, [Pin(m["name"], m["digest"]) for m in manifests], store or None


_HEX16 = re.compile(r"[0-9a-f]{16}")

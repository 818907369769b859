"""Which manifests a host wants: by entry names (config or lockfile) or by listing its toolchain's dir.

All of it works from the store alone: the boot path never needs the catalog.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import (
    IntegrityError,
    LockfileError,
    ManifestError,
    ObjectNotFound,
    ToolchainMismatch,
    UnsafePath,
    UsageError,
)
from ..format.fingerprint import Fingerprint
from ..format.layout import is_captured_name, manifest_key
from ..format.manifest import KIND_CAPTURED, KIND_ENTRY, KIND_SHARED, MAX_MANIFEST_BYTES, Manifest
from ..fs.atomic import atomic_write_bytes
from ..stores.base import Store
from ..stores.manifests import manifest_keys

if TYPE_CHECKING:
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


def write_lockfile(path: Path, backend: str, fingerprint: Fingerprint, manifests: list[Manifest]) -> None:
    doc = {"version": LOCK_VERSION, "backend": backend, "fingerprint_id": fingerprint.id,
           "manifests": [{"name": m.name, "digest": m.digest} for m in manifests]}
    atomic_write_bytes(path, json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n")


def read_lockfile(path: Path) -> tuple[str, str, list[Pin]]:
    """(backend, fingerprint id, pins). Every field is checked: a lockfile may be old, cut short or
    written by hand, and its names become store keys."""
    from .state import NotARecord, read_own, safe_rel

    try:
        doc = json.loads(read_own(path, 64 << 20))
    except FileNotFoundError:
        raise LockfileError(f"lockfile {path} does not exist", path=str(path)) from None
    except NotARecord as exc:
        raise LockfileError(f"lockfile {path} is {exc}", path=str(path)) from None
    except OSError as exc:
        raise UsageError(f"cannot read lockfile {path}: {exc.strerror or exc}", path=str(path)) from None
    except (ValueError, RecursionError) as exc:
        raise LockfileError(f"{path}: malformed lockfile ({str(exc)[:80]})", path=str(path)) from None
    if not isinstance(doc, dict):
        raise LockfileError(f"{path}: malformed lockfile (a JSON {type(doc).__name__}, not an object)", path=str(path))
    if doc.get("version") != LOCK_VERSION or isinstance(doc.get("version"), bool):
        raise LockfileError(f"{path}: unknown lockfile version {str(doc.get('version'))[:40]!r}", path=str(path))
    backend, fp, listed = doc.get("backend"), doc.get("fingerprint_id"), doc.get("manifests")
    if not isinstance(backend, str) or not backend or not isinstance(fp, str) or not _HEX16.fullmatch(fp):
        raise LockfileError(f"{path}: malformed lockfile (backend and fingerprint_id must name a toolchain)",
                            path=str(path))
    if not isinstance(listed, list) or not all(
            isinstance(m, dict) and isinstance(m.get("name"), str) and safe_rel(m["name"])
            and isinstance(m.get("digest"), str) and _HEX64.fullmatch(m["digest"]) for m in listed):
        raise LockfileError(f"{path}: malformed lockfile (manifests must be a list of {{name, digest}})",
                            path=str(path))
    return backend, fp, [Pin(m["name"], m["digest"]) for m in listed]


_HEX16 = re.compile(r"[0-9a-f]{16}")
_HEX64 = re.compile(r"[0-9a-f]{64}")

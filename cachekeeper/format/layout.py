"""The bucket layout: every object key cachekeeper writes, its builder and its parser, in one place.

This layout is a public format: builders of other versions, hydrating hosts and bucket policies
(`manifests/<fp>/captured/` grants) all read it. A store (file://, s3://, gs://, with an optional prefix
the store strips) holds:

    blobs/sha256/<d[:2]>/<d>                   a blob: one file's bytes, or a pack of small files
                                               (d = sha256 of the object's bytes, 64 hex)
    manifests/<fp>/<name>.json                 a manifest (canonical JSON) of toolchain <fp> (16 hex):
                                               an entry (name = entry key, 32 hex) or a toolchain-shared
                                               set (name = "<root>-<16 hex>", e.g. "pch-…")
    manifests/<fp>/captured/<h>.json           a captured set (name = "captured/<h>", h = 16 hex): runtime
                                               compiles a serving host wrote back; an older hydrate's
                                               listing of manifests/<fp>/ never descends into it
    signatures/<m>                             the ed25519 signature of the manifest whose bytes hash to <m>
    reports/<fp>/<t>-<host>-<n>.json           a miss report (reports.py) of toolchain <fp>: what a serving host
                                               served and compiled in one interval (t = UTC time as
                                               YYYYMMDDTHHMMSSZ, host = 16 hex, n = a counter); the only
                                               prefix a server-role identity may write (deploy/policies/)
    <dir>/.<name>.<writer>.<n>.ck-tmp          debris: the temp file of a file-store write killed before its
                                               rename (S3 multipart uploads and GCS resumable sessions leave
                                               no object; `Store.list_debris` reports those)

Objects are write-once. A lockfile is a local file, not an object: it pins manifests by (name, sha256
of the stored bytes) and its keys are rebuilt here from the fingerprint id it records.

Parsers take a key relative to the store and return a small value, or None for a key that is not of
that kind; they check shape only (a manifest's bytes are checked by `Manifest.from_bytes`). This module
does no I/O: listing a store's manifest keys is `stores/manifests.py` (over `listing_prefix` and
`select_manifest_keys` here), reading what they hold is `stores/inventory.py`'s job. It is on the boot
path: it imports nothing heavier than `fs.paths`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from ..fs.paths import TMP_SUFFIX, temp_tag

BLOBS = "blobs/"
BLOB_DIR = "blobs/sha256/"
MANIFESTS = "manifests/"
SIGNATURES = "signatures/"
REPORTS = "reports/"
MANIFEST_SUFFIX = ".json"
CAPTURED_DIR = "captured/"   # inside manifests/<fp>/, and the start of every captured set's name
TEMP_SUFFIX = TMP_SUFFIX     # the file store's temp names end so (fs.paths.temp_path writes them)

_HEX64 = re.compile(r"[0-9a-f]{64}")
# One path component that is neither empty nor a dot-name: temp files start with a dot, and "." / ".."
# would let a key escape its directory on a file store.
_COMPONENT = r"[^/.][^/]*"
_MANIFEST = re.compile(rf"manifests/({_COMPONENT})/((?:captured/)?{_COMPONENT})\.json")


# --- blobs ------------------------------------------------------------------------------------------


def blob_key(digest: str) -> str:
    return f"{BLOB_DIR}{digest[:2]}/{digest}"


def parse_blob_key(key: str) -> str | None:
    """The digest of the blob stored at `key`, or None if `key` is not a blob key."""
    digest = key.removeprefix(BLOB_DIR)
    if digest == key or len(digest) != 67 or digest[2] != "/" or digest[:2] != digest[3:5]:
        return None
    digest = digest[3:]
    return digest if _HEX64.fullmatch(digest) else None


# --- manifests --------------------------------------------------------------------------------------


class ManifestKey(NamedTuple):   # a NamedTuple, not a dataclass: it is built on the boot path, cheaply
    fingerprint_id: str
    name: str          # as in the manifest: entry key, shared-set name, or "captured/<hash>"

    @property
    def captured(self) -> bool:
        return is_captured_name(self.name)

    @property
    def stem(self) -> str:
        """The name without the captured/ directory: the id a listing shows and `show` matches."""
        return self.name.removeprefix(CAPTURED_DIR)

    @property
    def key(self) -> str:
        return manifest_key(self.fingerprint_id, self.name)


def manifest_key(fingerprint_id: str, name: str) -> str:
    return f"{MANIFESTS}{fingerprint_id}/{name}{MANIFEST_SUFFIX}"


def manifest_prefix(fingerprint_id: str | None = None) -> str:
    """Every manifest (no id), or one toolchain's, captured sets included (they sit one level down)."""
    return f"{MANIFESTS}{fingerprint_id}/" if fingerprint_id else MANIFESTS


def captured_prefix(fingerprint_id: str) -> str:
    return f"{MANIFESTS}{fingerprint_id}/{CAPTURED_DIR}"


def parse_manifest_key(key: str) -> ManifestKey | None:
    """Fingerprint id and name of the manifest stored at `key`, or None if `key` is not a manifest key
    (another depth, another suffix, a dot-name)."""
    match = _MANIFEST.fullmatch(key)
    return ManifestKey(match[1], match[2]) if match else None


def captured_set_name(set_id: str) -> str:
    """A captured set's manifest name ("captured/<16 hex>"), which puts it in the captured/ directory."""
    return f"{CAPTURED_DIR}{set_id}"


def is_captured_name(name: str) -> bool:
    return name.startswith(CAPTURED_DIR)


def listing_prefix(fingerprint_id: str | None = None, captured: bool | None = None) -> str:
    """The narrowest key prefix that lists a toolchain's manifests (or only its captured sets)."""
    return captured_prefix(fingerprint_id) if captured and fingerprint_id else manifest_prefix(fingerprint_id)


def select_manifest_keys(keys: Iterable[str], captured: bool | None = None) -> list[ManifestKey]:
    """The manifest keys among `keys`, sorted; `captured` True/False keeps only captured sets or only the
    others. Keys that are not manifest keys are left out."""
    found = (parse_manifest_key(k) for k in keys)
    return sorted((mk for mk in found if mk is not None and (captured is None or mk.captured == captured)),
                  key=lambda mk: mk.key)


def matching(keys: Iterable[ManifestKey], prefix: str) -> list[ManifestKey]:
    """Manifests whose name (or, for a captured set, its id after `captured/`) starts with `prefix`."""
    return [mk for mk in keys if mk.name.startswith(prefix) or mk.stem.startswith(prefix)]


# --- signatures -------------------------------------------------------------------------------------


def signature_key(manifest_digest: str) -> str:
    return f"{SIGNATURES}{manifest_digest}"


def parse_signature_key(key: str) -> str | None:
    """The digest of the manifest whose signature is stored at `key`, or None."""
    digest = key.removeprefix(SIGNATURES)
    return digest if digest != key and _HEX64.fullmatch(digest) else None


# --- miss reports -----------------------------------------------------------------------------------

_REPORT = re.compile(r"reports/([0-9a-f]{16})/(\d{8}T\d{6}Z)-([0-9a-f]{16})-(\d{1,9})\.json")


class ReportKey(NamedTuple):
    fingerprint_id: str
    stamp: str         # YYYYMMDDTHHMMSSZ (UTC): sorts as time, so `--since` needs no read
    host: str          # 16 hex: a hash of the host name, never the name itself
    n: int

    @property
    def key(self) -> str:
        return report_key(self.fingerprint_id, self.stamp, self.host, self.n)


def report_prefix(fingerprint_id: str | None = None) -> str:
    return f"{REPORTS}{fingerprint_id}/" if fingerprint_id else REPORTS


def report_key(fingerprint_id: str, stamp: str, host: str, n: int) -> str:
    return f"{REPORTS}{fingerprint_id}/{stamp}-{host}-{n}{MANIFEST_SUFFIX}"


def parse_report_key(key: str) -> ReportKey | None:
    """Toolchain, time, host and counter of the miss report stored at `key`, or None."""
    match = _REPORT.fullmatch(key)
    return ReportKey(match[1], match[2], match[3], int(match[4])) if match else None


# --- debris -----------------------------------------------------------------------------------------


class TempKey(NamedTuple):
    directory: str     # where the final object was going ("blobs/sha256/ab/", "" at the top)
    writer: str        # the writer's tag (its pid by default): a sweep tells live writers from dead ones


def parse_temp_key(key: str) -> TempKey | None:
    """The file store's temp object at `key` (`<dir>/.<name>.<writer>.<n>.ck-tmp`), or None."""
    directory, _, name = key.rpartition("/")
    writer = temp_tag(name) if name.startswith(".") else None
    return TempKey(f"{directory}/" if directory else "", writer) if writer else None

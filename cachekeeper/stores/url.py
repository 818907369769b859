"""Store URLs, parsed in one place: `open_store` and the config's `store:` key both read them here.

    file:///abs/dir, file://rel/dir or a plain path   a directory (relative to a base: the cwd, or the config's)
    s3://bucket/prefix                                 an S3 bucket (or S3-compatible server) and key prefix
    gs://bucket/prefix                                 a GCS bucket and key prefix

Parsing imports no SDK: the store modules that need one are imported only by `open_store`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

SCHEMES = ("file", "s3", "gs")
_BUCKET_SCHEMES = ("s3", "gs")
_EXPECTED = "use file:///path, s3://bucket/prefix or gs://bucket/prefix"


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL; str() gives its canonical form (absolute file path, prefix without slashes)."""

    scheme: str     # one of SCHEMES
    bucket: str     # "" for file
    path: str       # file: the absolute directory; s3/gs: the key prefix without leading or trailing "/"

    def __str__(self) -> str:
        if self.scheme == "file":
            return f"file://{self.path}"
        return f"{self.scheme}://{self.bucket}/{self.path}" if self.path else f"{self.scheme}://{self.bucket}"


def local_path(raw: str, base: str | Path | None = None) -> str:
    """`raw` as a normalised absolute path: `~` expanded, a relative path taken against `base` (default cwd)."""
    path = Path(os.path.expanduser(raw))
    return os.path.normpath(path if path.is_absolute() else Path(base or Path.cwd()).absolute() / path)


def parse_store_url(url: str, base: str | Path | None = None) -> StoreURL:
    """Validate a store URL; a relative file path resolves against `base` (default the cwd).
    Raises UsageError (its `url` field set) for an unknown scheme, a bucket URL without a bucket, or no path."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "file", url   # a plain path
    scheme = scheme.lower()
    if scheme == "file":
        if not rest:
            raise UsageError(f"store {url!r} names no directory", _EXPECTED, url=url)
        return StoreURL("file", "", local_path(rest, base))
    if scheme in _BUCKET_SCHEMES:
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise UsageError(f"store {url!r} names no bucket", f"use {scheme}://bucket/prefix", url=url)
        return StoreURL(scheme, bucket, prefix.strip("/"))
    raise UsageError(f"unsupported store URL scheme {scheme!r} in {url!r}", _EXPECTED, url=url)

"""Store URLs as values: `StoreURL`, the parsing rules the stores share, and did-you-mean suggestions.

Which schemes exist is not written here: each store is registered under its scheme in the entry-point
group `cachekeeper.stores` (stores/schemes.py), and the registered object parses its own URLs
(`Store.parse_url`). cachekeeper's own register the same way:

    file:///abs/dir, file://rel/dir or a plain path   a directory (relative to a base: the cwd, or the config's)
    s3://bucket/prefix                                 an S3 bucket (or S3-compatible server) and key prefix
    gs://bucket/prefix                                 a GCS bucket and key prefix

Parsing imports no SDK: a store module that needs one is imported only to open a store.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL; str() gives its canonical form (absolute file path, prefix without slashes)."""

    scheme: str     # the registered scheme, lower case
    bucket: str     # the location after `scheme://` (a bucket); "" for file
    path: str       # file: the absolute directory; s3/gs: the key prefix without leading or trailing "/"

    def __str__(self) -> str:
        if self.bucket and self.path:
            return f"{self.scheme}://{self.bucket}/{self.path}"
        return f"{self.scheme}://{self.bucket or self.path}"


def split_url(url: str) -> tuple[str, str]:
    """(scheme in lower case, the rest after `://`); ("", url) for a plain path."""
    scheme, sep, rest = url.partition("://")
    return (scheme.lower(), rest) if sep else ("", url)


def local_path(raw: str, base: str | Path | None = None) -> str:
    """`raw` as a normalised absolute path: `~` expanded, a relative path taken against `base` (default cwd)."""
    path = Path(os.path.expanduser(raw))
    return os.path.normpath(path if path.is_absolute() else Path(base or Path.cwd()).absolute() / path)


def location_url(url: str) -> StoreURL:
    """`scheme://location/prefix` with a location required (s3://, gs://, and a plugin's by default)."""
    scheme, rest = split_url(url)
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise UsageError(f"store {url!r} names no bucket", f"use {scheme}://bucket/prefix", url=url)
    return StoreURL(scheme, bucket, prefix.strip("/"))


# `gs:/bucket`, `s3:bucket`, `file:/x`, `gs//bucket`: a scheme-like word without its `://`.
_NEAR_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)(:|//)(.*)", re.S)


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice `word` most likely misspells (difflib), or None."""
    close = difflib.get_close_matches(word.lower(), sorted(choices), n=1)
    return close[0] if close else None


def near_url(text: str, schemes: Iterable[str], parses: Callable[[str], bool]) -> str | None:
    """The URL a plain path was meant to be (`gs:/bucket` -> `gs://bucket`), or None when it does not
    read as a mistyped URL of one of `schemes`. `parses` says whether a candidate is a valid URL."""
    match = _NEAR_URL.fullmatch(text)
    if not match:
        return None
    word, sep, rest = match.groups()
    schemes = set(schemes)
    scheme = word.lower() if word.lower() in schemes else closest(word, schemes)
    if scheme is None or (sep == "//" and scheme != word.lower()):
        return None   # `data//x` is a path; `gs//x` is a URL missing its colon
    return suggest_url(scheme, rest, parses) or f"{scheme}://{rest}"


def suggest_url(scheme: str, rest: str, parses: Callable[[str], bool]) -> str | None:
    """`scheme://rest`, or with the slashes `rest` starts with dropped, whichever parses first."""
    for candidate in (f"{scheme}://{rest}", f"{scheme}://{rest.lstrip('/')}"):
        if parses(candidate):
            return candidate
    return None

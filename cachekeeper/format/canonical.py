"""Canonical JSON: the one byte form every key and manifest digest is computed over.

Sorted keys, no whitespace, UTF-8, no NaN. Two processes on two hosts produce the same bytes for the
same value, so a digest is a stable name.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def digest(value: Any) -> str:
    """sha256 hex of the canonical JSON of `value`."""
    return hashlib.sha256(dumps(value)).hexdigest()

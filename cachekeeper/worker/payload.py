"""The build queue's job payload: what a worker needs to build an entry it did not plan itself.

Versioned, because workers of different releases can share one catalog: a payload of another version is
refused with one line naming both versions (never a KeyError or TypeError from a changed field).
"""

from __future__ import annotations

import json
from typing import Any

from ..backends.base import ModelRef
from ..config import MatrixEntry
from ..errors import QueuePayloadError
from ..format.spec import EntrySpec

# 1: the unversioned {"spec", "model"} of the first release; 2: ModelRef carried `pipeline` (now `warmup`)
PAYLOAD_VERSION = 3


def encode(entry: MatrixEntry) -> str:
    return json.dumps({"v": PAYLOAD_VERSION, "spec": entry.spec.to_dict(), "model": entry.model.to_dict()},
                      sort_keys=True)


def version_of(payload: str) -> int | None:
    """The payload's version (1 for the unversioned first format), None if it is not a JSON object."""
    try:
        d = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(d, dict):
        return None
    v = d.get("v", 1)
    return v if isinstance(v, int) else None


def decode(payload: str, where: str) -> MatrixEntry:
    """The entry a job payload names; `where` names the job in the error."""
    v = version_of(payload)
    if v != PAYLOAD_VERSION:
        who = "an older" if v is not None and v < PAYLOAD_VERSION else "a newer or unknown"
        raise QueuePayloadError(f"queue job {where} has payload version {v if v is not None else '?'}, written by "
                                f"{who} cachekeeper; this worker reads version {PAYLOAD_VERSION}")
    d: dict[str, Any] = json.loads(payload)
    try:
        return MatrixEntry(EntrySpec.from_dict(d["spec"]), ModelRef(**d["model"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise QueuePayloadError(f"queue job {where} has a malformed version-{v} payload ({exc})") from None

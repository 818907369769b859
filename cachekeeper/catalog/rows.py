"""What the catalog hands back: frozen values, never ORM objects, so callers never hold a session.

This module imports no SQLAlchemy: code that only passes rows around stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ..format.spec import EntrySpec


@dataclass(frozen=True)
class CatalogRow:
    """One manifest the catalog knows: where it is and what it is for."""

    digest: str
    key: str
    kind: str
    name: str
    fingerprint_id: str
    entry_key: str | None
    backend: str
    model: str | None
    component: str | None
    mode: str | None
    height: int | None
    width: int | None
    batch: int | None
    dtype: str | None
    revision: str | None
    total_size: int
    file_count: int
    blob_count: int
    created_at: datetime
    store_url: str
    spec: Mapping[str, Any] | None
    build: Mapping[str, Any]

    def entry_spec(self) -> EntrySpec | None:
        return EntrySpec.from_dict(dict(self.spec)) if self.spec else None


@dataclass(frozen=True)
class FingerprintRow:
    id: str
    backend: str
    fields: Mapping[str, str]
    first_seen: datetime
    entries: int        # manifests of kind "entry" (prebuilt)
    shared: int         # manifests of kind "shared"
    total_size: int     # bytes over all its manifests
    captured: int = 0   # manifests of kind "captured": runtime compiles serving hosts wrote back


@dataclass(frozen=True)
class Claim:
    """A leased build job. `attempts` doubles as a fencing token: a reclaim bumps it."""

    fingerprint_id: str
    entry_key: str
    payload: str
    worker: str
    attempts: int
    lease_expires_at: datetime


@dataclass(frozen=True)
class EntryCost:
    """One entry built for a toolchain: what it is, how big, how long its build took (None: unrecorded)."""

    key: str
    label: str
    size: int
    seconds: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "entry": self.label, "size": self.size, "seconds": self.seconds}


JobStatus = Literal["pending", "running", "done", "failed"]  # catalog/queue.py moves a job along these


@dataclass(frozen=True)
class JobRow:
    fingerprint_id: str
    entry_key: str
    payload: str
    status: JobStatus
    worker: str | None
    lease_expires_at: datetime | None
    attempts: int
    last_error: str | None
    manifest_digest: str | None
    updated_at: datetime


@dataclass(frozen=True)
class RebuildReport:
    added: tuple[str, ...]                     # manifest keys newly recorded
    removed: tuple[str, ...]                   # keys of rows whose manifest is gone or no longer valid
    invalid: tuple[tuple[str, str], ...]       # (key, why) for objects that are not valid manifests
    unchanged: int

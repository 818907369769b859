"""The catalog schema as typed SQLAlchemy models: the source for migrations and for query columns.

Rows never leave the package as ORM objects; `catalog.py` converts them to the frozen dataclasses in
`rows.py`. Constraint names are explicit so SQLite batch migrations and Postgres agree on them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

KINDS = ("entry", "shared", "captured")   # "captured" since revision 0003
JOB_STATUSES = ("pending", "running", "done", "failed")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class FingerprintModel(Base):
    __tablename__ = "fingerprints"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    backend: Mapped[str] = mapped_column(String(64))
    fields: Mapped[dict[str, Any]] = mapped_column(JSON)
    first_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ManifestModel(Base):
    __tablename__ = "manifests"
    __table_args__ = (
        # Also the index for hydrate's lookup (fingerprint_id, name IN ...).
        UniqueConstraint("fingerprint_id", "name"),
        # coverage / find: one backend and model across (or within) fingerprints.
        Index("ix_manifests_backend_model_fingerprint_id", "backend", "model", "fingerprint_id"),
        CheckConstraint(f"kind IN {KINDS!r}", name="kind"),
    )

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)   # sha256 of the manifest bytes
    key: Mapped[str] = mapped_column(String(512))                      # its object key in the store
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(255))
    fingerprint_id: Mapped[str] = mapped_column(ForeignKey("fingerprints.id"))
    entry_key: Mapped[str | None] = mapped_column(String(64))           # = name for entries, NULL for shared
    backend: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(255))
    component: Mapped[str | None] = mapped_column(String(255))
    mode: Mapped[str | None] = mapped_column(String(64))
    height: Mapped[int | None] = mapped_column(Integer)
    width: Mapped[int | None] = mapped_column(Integer)
    batch: Mapped[int | None] = mapped_column(Integer)
    dtype: Mapped[str | None] = mapped_column(String(32))
    revision: Mapped[str | None] = mapped_column(String(255))
    total_size: Mapped[int] = mapped_column(BigInteger)
    file_count: Mapped[int] = mapped_column(Integer)
    blob_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    store_url: Mapped[str] = mapped_column(String(1024))
    spec: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    build: Mapped[dict[str, Any]] = mapped_column(JSON)


class BuildJobModel(Base):
    __tablename__ = "build_jobs"
    __table_args__ = (
        # claim: pending rows, or running rows whose lease ran out.
        Index("ix_build_jobs_status_lease_expires_at", "status", "lease_expires_at"),
        CheckConstraint(f"status IN {JOB_STATUSES!r}", name="status"),
    )

    # No foreign key: jobs are queued before the fingerprint row exists (`record` creates it).
    fingerprint_id: Mapped[str] = mapped_column(String(16), primary_key=True)
    entry_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    spec: Mapped[str] = mapped_column(Text)                             # the caller's JSON payload, verbatim
    status: Mapped[str] = mapped_column(String(16))
    worker: Mapped[str | None] = mapped_column(String(255))
    # The process holding the lease (revision 0004): a holder on this host whose pid is gone is dead now.
    holder_host: Mapped[str | None] = mapped_column(String(255))
    holder_pid: Mapped[int | None] = mapped_column(Integer)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    manifest_digest: Mapped[str | None] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

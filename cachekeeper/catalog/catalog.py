"""`Catalog`: the index of published manifests, and the distributed build queue.

The store is the source of truth; the catalog is an index over it that `rebuild` can recreate, so every
write here is idempotent. Each public method runs in its own short transaction and returns frozen rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from sqlalchemy import Connection, Delete, Engine, Row, Select, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL

from ..errors import ManifestError, UsageError
from ..format.manifest import KIND_CAPTURED, KIND_ENTRY, KIND_SHARED, Manifest
from ..stores.base import Store
from . import db, queue, rebuild
from .listing import where_manifests
from .models import Base, FingerprintModel, ManifestModel
from .rows import CatalogRow, Claim, FingerprintRow, JobRow, RebuildReport
from .settings import default_url

LOOKUP_CHUNK = 500   # names per IN (...): far below SQLite's and Postgres' parameter limits


class Catalog:
    """Open with `Catalog.open(url)`; use as a context manager or call `close()`."""

    url: str   # for display: the password is masked

    def __init__(self, url: URL, engine: Engine) -> None:
        self._engine = engine
        self.url = db.mask(url)

    # --- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def open(cls, url: str | None = None, *, auto_migrate: bool | None = None) -> Catalog:
        """A catalog at the head revision. SQLite (embedded) migrates itself unless auto_migrate=False;
        other databases raise CatalogNotMigrated until `cachekeeper db upgrade` has run."""
        catalog = cls.connect(url)
        try:
            rev = catalog._revision()
            migrate = catalog._engine.dialect.name == "sqlite" if auto_migrate is None else auto_migrate
            if rev != db.head() and migrate:
                catalog.upgrade()
                rev = catalog._revision()
            db.require_head(rev, catalog.url)
        except BaseException:
            catalog.close()
            raise
        return catalog

    @classmethod
    def connect(cls, url: str | None = None) -> Catalog:
        """A reachable catalog at whatever revision it is: for `db upgrade/downgrade/current`."""
        parsed = db.parse_url(url or default_url())
        catalog = cls(parsed, db.make_engine(parsed))
        try:
            db.connect(catalog._engine, catalog.url).close()
        except BaseException:
            catalog.close()
            raise
        return catalog

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Catalog({self.url!r})"

    # --- migrations ------------------------------------------------------------------------------

    def upgrade(self, revision: str = "head") -> None:
        db.migrate(self._engine, self.url, revision, down=False)

    def downgrade(self, revision: str) -> None:
        db.migrate(self._engine, self.url, revision, down=True)

    def current(self) -> str | None:
        return self._revision()

    def _revision(self) -> str | None:
        with self._read() as conn:
            return db.check_revision(conn, self.url)

    # --- manifests -------------------------------------------------------------------------------

    def record(self, manifest: Manifest, *, store_url: str) -> None:
        """Index a published manifest. Idempotent by digest; a new digest for the same key replaces the old."""
        reason = rebuild.problem(manifest)
        if reason:
            raise ManifestError(f"{manifest.key}: {reason}", key=manifest.key)
        with self._write() as conn:
            _record(conn, manifest, store_url)

    def find(self, *, fingerprint_id: str | None = None, backend: str | None = None, model: str | None = None,
             kind: str = KIND_ENTRY) -> list[CatalogRow]:
        with self._read() as conn:
            return [_catalog_row(r) for r in conn.execute(find_query(fingerprint_id, backend, model, kind))]

    def listing(self, *, fingerprint_id: str | None = None, backend: str | None = None, model: str | None = None,
                kind: str = KIND_ENTRY, as_json: bool = False) -> Iterator[list[str]]:
        """What `find` returns, as `ls` lines (text, or JSON lines) in batches streamed from the database
        (`listing.py`): constant memory, no row objects, at any catalog size."""
        from .listing import lines

        with self._read() as conn:
            yield from lines(conn, self.url, fingerprint_id=fingerprint_id, backend=backend, model=model, kind=kind,
                             as_json=as_json)

    def lookup(self, fingerprint_id: str, names: Iterable[str]) -> dict[str, CatalogRow]:
        """The rows for those entry keys / shared-set names that the catalog has; absent names are misses."""
        wanted = sorted(set(names))
        found: dict[str, CatalogRow] = {}
        with self._read() as conn:
            for i in range(0, len(wanted), LOOKUP_CHUNK):
                for r in conn.execute(lookup_query(fingerprint_id, wanted[i:i + LOOKUP_CHUNK])):
                    found[r.name] = _catalog_row(r)
        return found

    def digests(self, fingerprint_id: str, names: Iterable[str]) -> dict[str, str]:
        """name -> manifest digest for those names the catalog has: `lookup` without building rows (what
        prebuild plans with, so a 10k-entry rerun reads two columns)."""
        wanted = sorted(set(names))
        found: dict[str, str] = {}
        with self._read() as conn:
            for i in range(0, len(wanted), LOOKUP_CHUNK):
                query = select(ManifestModel.name, ManifestModel.digest).where(
                    ManifestModel.fingerprint_id == fingerprint_id, ManifestModel.name.in_(wanted[i:i + LOOKUP_CHUNK]))
                found.update((name, digest) for name, digest in conn.execute(query))
        return found

    def fingerprints(self) -> list[FingerprintRow]:
        with self._read() as conn:
            return [_fingerprint_row(r) for r in conn.execute(_fingerprints_query())]

    def forget(self, digest: str) -> None:
        """Drop one manifest's row (the store object is untouched); an unknown digest is not an error."""
        with self._write() as conn:
            conn.execute(delete(ManifestModel).where(ManifestModel.digest == digest))

    def forget_keys(self, keys: Iterable[str]) -> int:
        """Drop the rows of manifests deleted from the store (by store key), so the catalog follows the
        store after `gc --run` and `verify --repair`; how many rows went."""
        todo, gone = list(keys), 0
        with self._write() as conn:
            for i in range(0, len(todo), LOOKUP_CHUNK):
                chunk = todo[i:i + LOOKUP_CHUNK]
                gone += conn.execute(delete(ManifestModel).where(ManifestModel.key.in_(chunk))).rowcount or 0
        return gone

    def rebuild(self, store: Store) -> RebuildReport:
        """Make the catalog mirror `store`'s manifests: record new ones, drop rows whose object is gone."""
        found = rebuild.scan(store)
        with self._write() as conn:
            existing = {digest: key for digest, key in conn.execute(select(ManifestModel.digest, ManifestModel.key))}
            gone = [d for d in existing if d not in found.manifests]
            for i in range(0, len(gone), LOOKUP_CHUNK):
                conn.execute(delete(ManifestModel).where(ManifestModel.digest.in_(gone[i:i + LOOKUP_CHUNK])))
            new = [m for d, m in found.manifests.items() if d not in existing]
            for manifest in new:
                _record(conn, manifest, store.url)
            # The catalog indexes one store: rows kept from before now point at this one.
            conn.execute(update(ManifestModel).where(ManifestModel.store_url != store.url).values(store_url=store.url))
        return RebuildReport(added=tuple(sorted(m.key for m in new)), removed=tuple(sorted(existing[d] for d in gone)),
                             invalid=found.invalid, unchanged=len(existing) - len(gone))

    # --- build queue -----------------------------------------------------------------------------

    def enqueue(self, jobs: Iterable[tuple[str, str, str]]) -> int:
        """Queue (fingerprint_id, entry_key, payload_json) jobs; existing ones, whatever their status, stay
        untouched. Returns how many were new."""
        with self._write() as conn:
            return queue.enqueue(conn, jobs)

    def requeue(self, keys: Iterable[tuple[str, str]]) -> int:
        """Make done/failed jobs claimable again (the caller knows their artifacts are not in the store)."""
        with self._write() as conn:
            return queue.requeue(conn, keys)

    def claim(self, worker: str, *, lease_s: float, fingerprint_id: str | None = None,
              exclude: Collection[str] = ()) -> Claim | None:
        """Lease one pending job (or one whose lease expired), or None when there is nothing to build.
        Jobs whose entry key is in `exclude` are passed over."""
        _check_lease(lease_s)
        with self._write() as conn:
            return queue.claim(conn, worker, lease_s, fingerprint_id, exclude)

    def renew(self, claim: Claim, lease_s: float) -> bool:
        """Extend the lease; False means it was lost (reclaimed after expiry): stop building."""
        _check_lease(lease_s)
        with self._write() as conn:
            return queue.renew(conn, claim, lease_s)

    def finish(self, claim: Claim, manifest_digest: str) -> None:
        with self._write() as conn:
            queue.finish(conn, claim, manifest_digest)

    def fail(self, claim: Claim, error: str, *, retry: bool) -> None:
        """Record the failure (log tail kept); back to pending if `retry`, else failed for good.
        A no-op once the lease is lost: the worker holding it now owns the outcome."""
        with self._write() as conn:
            queue.fail(conn, claim, error, retry)

    def queue_counts(self, fingerprint_id: str | None = None) -> dict[str, int]:
        with self._read() as conn:
            return queue.counts(conn, fingerprint_id)

    def jobs(self, *, fingerprint_id: str | None = None, status: str | None = None) -> list[JobRow]:
        with self._read() as conn:
            return queue.jobs(conn, fingerprint_id, status)

    def job_states(self, fingerprint_id: str, keys: Iterable[str]) -> dict[str, JobRow]:
        """The queue's jobs for these entry keys (absent keys were never queued)."""
        wanted = sorted(set(keys))
        found: dict[str, JobRow] = {}
        with self._read() as conn:
            for i in range(0, len(wanted), LOOKUP_CHUNK):
                found.update((j.entry_key, j) for j in queue.states(conn, fingerprint_id, wanted[i:i + LOOKUP_CHUNK]))
        return found

    def build_costs(self, entry_keys: Iterable[str], *, exclude_fingerprints: Collection[str] = ()) -> dict[str, float]:
        """Mean recorded build seconds per entry key, over toolchains not in `exclude_fingerprints`."""
        wanted = sorted(set(entry_keys))
        sums: dict[str, list[float]] = {}
        with self._read() as conn:
            for i in range(0, len(wanted), LOOKUP_CHUNK):
                chunk = wanted[i:i + LOOKUP_CHUNK]
                query = (select(ManifestModel.entry_key, ManifestModel.fingerprint_id, ManifestModel.build)
                         .where(ManifestModel.entry_key.in_(chunk)))
                for key, fp, build in conn.execute(query):
                    seconds = (build or {}).get("seconds")
                    if fp not in exclude_fingerprints and isinstance(seconds, int | float) and seconds > 0:
                        sums.setdefault(key, []).append(float(seconds))
        return {k: sum(v) / len(v) for k, v in sums.items()}

    # --- transactions ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        with db.connect(self._engine, self.url) as conn, db.errors(self.url), conn.begin():
            yield conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        with db.connect(self._engine, self.url) as conn, db.errors(self.url):
            conn.execution_options(**{db.WRITE: True})   # SQLite: BEGIN IMMEDIATE
            with conn.begin():
                yield conn


# --- queries (module level so tests can EXPLAIN exactly what runs) -----------------------------------


def find_query(fingerprint_id: str | None, backend: str | None, model: str | None, kind: str) -> Select[Any]:
    return where_manifests(select(ManifestModel), fingerprint_id, backend, model, kind).order_by(
        ManifestModel.fingerprint_id, ManifestModel.backend, ManifestModel.model, ManifestModel.name)


def lookup_query(fingerprint_id: str, names: list[str]) -> Select[Any]:
    return select(ManifestModel).where(ManifestModel.fingerprint_id == fingerprint_id, ManifestModel.name.in_(names))


def _fingerprints_query() -> Select[Any]:
    entries = func.count(ManifestModel.digest).filter(ManifestModel.kind == KIND_ENTRY)
    shared = func.count(ManifestModel.digest).filter(ManifestModel.kind == KIND_SHARED)
    captured = func.count(ManifestModel.digest).filter(ManifestModel.kind == KIND_CAPTURED)
    size = func.coalesce(func.sum(ManifestModel.total_size), 0)
    return (select(FingerprintModel.id, FingerprintModel.backend, FingerprintModel.fields, FingerprintModel.first_seen,
                   entries.label("entries"), shared.label("shared"), captured.label("captured"),
                   size.label("total_size"))
            .outerjoin(ManifestModel, ManifestModel.fingerprint_id == FingerprintModel.id)
            .group_by(FingerprintModel.id).order_by(FingerprintModel.id))


# --- writes ------------------------------------------------------------------------------------------


def _record(conn: Connection, manifest: Manifest, store_url: str) -> None:
    at = queue.now()
    fp = manifest.fingerprint
    _insert_ignore(conn, FingerprintModel,
                   {"id": fp.id, "backend": fp.backend, "fields": dict(fp.fields), "first_seen": at})
    # The store keeps one object per key; a re-published key (after gc) supersedes the old digest.
    conn.execute(_superseded(manifest))
    _insert_ignore(conn, ManifestModel, _manifest_values(manifest, store_url) | {"created_at": at})


def _superseded(manifest: Manifest) -> Delete:
    return delete(ManifestModel).where(ManifestModel.fingerprint_id == manifest.fingerprint.id,
                                       ManifestModel.name == manifest.name, ManifestModel.digest != manifest.digest)


def _insert_ignore(conn: Connection, model: type[Base], values: dict[str, Any]) -> None:
    # ON CONFLICT DO NOTHING: two workers recording the same manifest at once both succeed.
    ins = postgresql.insert(model) if conn.dialect.name == "postgresql" else sqlite.insert(model)
    conn.execute(ins.values(values).on_conflict_do_nothing())


def _manifest_values(m: Manifest, store_url: str) -> dict[str, Any]:
    spec = m.spec
    return {
        "digest": m.digest, "key": m.key, "kind": m.kind, "name": m.name, "fingerprint_id": m.fingerprint.id,
        "entry_key": m.name if m.kind == KIND_ENTRY else None,
        "backend": spec.backend if spec else m.fingerprint.backend,
        "model": spec.model if spec else None, "component": spec.component if spec else None,
        "mode": spec.mode if spec else None, "height": spec.shape.height if spec else None,
        "width": spec.shape.width if spec else None, "batch": spec.shape.batch if spec else None,
        "dtype": spec.dtype if spec else None, "revision": spec.revision if spec else None,
        "total_size": m.total_size, "file_count": len(m.files), "blob_count": len(m.blobs),
        "store_url": store_url, "spec": spec.to_dict() if spec else None,
        # A captured set's provenance (host, time, what it extended) is what `ls --captured` shows.
        "build": dict(m.provenance or {}) if m.kind == KIND_CAPTURED else dict(m.build),
    }


# --- rows --------------------------------------------------------------------------------------------


def _catalog_row(r: Row[Any]) -> CatalogRow:
    return CatalogRow(
        digest=r.digest, key=r.key, kind=r.kind, name=r.name, fingerprint_id=r.fingerprint_id,
        entry_key=r.entry_key, backend=r.backend, model=r.model, component=r.component, mode=r.mode,
        height=r.height, width=r.width, batch=r.batch, dtype=r.dtype, revision=r.revision,
        total_size=r.total_size, file_count=r.file_count, blob_count=r.blob_count,
        created_at=queue.aware(r.created_at), store_url=r.store_url, spec=r.spec, build=r.build or {})


def _fingerprint_row(r: Row[Any]) -> FingerprintRow:
    return FingerprintRow(id=r.id, backend=r.backend, fields=r.fields, first_seen=queue.aware(r.first_seen),
                          entries=r.entries, shared=r.shared, total_size=int(r.total_size), captured=r.captured)


def _check_lease(lease_s: float) -> None:
    if not lease_s > 0:
        raise UsageError(f"a lease must last a positive number of seconds, not {lease_s!r}")

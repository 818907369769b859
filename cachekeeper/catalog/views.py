"""Read-only aggregations for the inspection commands and the dashboard.

Everything is counted, summed and paginated in SQL, so a 100k-entry catalog answers in milliseconds and
the dashboard's first view stays under a second (benchmarks/inspect_scale.py). Kept out of catalog.py:
these are views over its tables, not part of the index's write contract.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import ColumnElement, Connection, and_, case, func, select
from sqlalchemy.orm import aliased

from ..format.fingerprint import Fingerprint
from ..format.layout import CAPTURED_DIR
from ..format.manifest import KIND_CAPTURED, KIND_ENTRY, KIND_SHARED
from .models import BuildJobModel, FingerprintModel, ManifestModel
from .queue import aware, clock, now
from .rows import EntryCost

if TYPE_CHECKING:
    from .catalog import Catalog

STATUSES = ("built", "missing", "captured")
# Matrix cells are manifests with a spec (entries). A captured set (runtime compiles a serving host wrote
# back) has no spec, hence no shape: the matrix shows it as one row per toolchain (`fingerprint_detail`).
SPECCED = ManifestModel.model.is_not(None)


@contextlib.contextmanager
def reading(catalog: Catalog) -> Iterator[Connection]:
    """One read transaction (errors translated to CatalogError lines, like every Catalog method)."""
    with catalog._read() as conn:
        yield conn


def _seconds() -> ColumnElement[Any]:
    seconds: ColumnElement[Any] = ManifestModel.build["seconds"].as_float()
    return seconds


# What `_label` reads from a row.
_LABEL_COLUMNS = (ManifestModel.model, ManifestModel.component, ManifestModel.backend, ManifestModel.mode,
                  ManifestModel.height, ManifestModel.width, ManifestModel.batch, ManifestModel.dtype)


def _label(r: Any) -> str:
    return f"{r.model}/{r.component} {r.backend}:{r.mode} {r.height}x{r.width}x{r.batch} {r.dtype}"


# --- fingerprints ------------------------------------------------------------------------------------


def fingerprint_ids(conn: Connection, prefix: str = "") -> list[str]:
    query = select(FingerprintModel.id).order_by(FingerprintModel.id)
    if prefix:
        query = query.where(FingerprintModel.id.startswith(prefix, autoescape=True))
    return list(conn.scalars(query))


def fingerprint(conn: Connection, fp_id: str) -> Fingerprint | None:
    query = select(FingerprintModel.backend, FingerprintModel.fields).where(FingerprintModel.id == fp_id)
    row = conn.execute(query).first()
    return Fingerprint.of(row.backend, row.fields) if row else None


# --- diff --------------------------------------------------------------------------------------------


def entries_only_in(conn: Connection, a_id: str, b_id: str) -> list[EntryCost]:
    """Entries built for toolchain `a_id` that `b_id` lacks (an anti-join on the (fingerprint, name) index)."""
    other = aliased(ManifestModel)
    lacks = ~select(other.digest).where(other.fingerprint_id == b_id, other.name == ManifestModel.name).exists()
    query = (select(ManifestModel.name, *_LABEL_COLUMNS, ManifestModel.total_size, _seconds().label("seconds"))
             .where(ManifestModel.fingerprint_id == a_id, ManifestModel.kind == KIND_ENTRY, lacks)
             .order_by(ManifestModel.model, ManifestModel.component, ManifestModel.mode, ManifestModel.height,
                       ManifestModel.width, ManifestModel.batch, ManifestModel.dtype, ManifestModel.name))
    return [EntryCost(r.name, _label(r), int(r.total_size), None if r.seconds is None else float(r.seconds))
            for r in conn.execute(query)]


def holders(conn: Connection, name: str) -> list[Fingerprint]:
    """Every toolchain that has entry `name` built."""
    query = (select(FingerprintModel.backend, FingerprintModel.fields)
             .join(ManifestModel, ManifestModel.fingerprint_id == FingerprintModel.id)
             .where(ManifestModel.name == name, ManifestModel.kind == KIND_ENTRY).order_by(FingerprintModel.id))
    return [Fingerprint.of(r.backend, r.fields) for r in conn.execute(query)]


# --- the coverage matrix -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MatrixFilter:
    fingerprint_id: str
    backend: str
    model: str | None = None
    mode: str | None = None
    dtype: str | None = None
    status: str | None = None        # built | missing | captured (dashboard/params.STATUSES)
    page: int = 1
    per_page: int = 5                # models per page: each brings all its (component, mode, dtype) rows


CellStatus = Literal["built", "captured", "missing", "partial"]


@dataclass(frozen=True)
class Cell:
    shape: str                # HxWxB
    status: CellStatus
    entries: int              # distinct entries of this cell over every toolchain of the backend
    here: int                 # of those, built (or captured) for the chosen toolchain
    size: int
    seconds: float | None


@dataclass(frozen=True)
class MatrixRow:
    model: str
    component: str
    mode: str
    dtype: str
    cells: dict[str, Cell]    # shape -> cell


@dataclass(frozen=True)
class Matrix:
    rows: tuple[MatrixRow, ...]
    shapes: tuple[str, ...]
    has_next: bool


def _cell_status(entries: int, here: int, built: int, captured: int) -> CellStatus:
    if here == 0:
        return "missing"
    if here < entries:
        return "partial"
    return "captured" if captured and not built else "built"


def _row_filter(f: MatrixFilter) -> list[ColumnElement[bool]]:
    cond = [ManifestModel.backend == f.backend, ManifestModel.kind != KIND_SHARED, SPECCED]
    for column, value in ((ManifestModel.model, f.model), (ManifestModel.mode, f.mode), (ManifestModel.dtype, f.dtype)):
        if value is not None:
            cond.append(column == value)
    return cond


def _aggregates(fp_id: str) -> dict[str, ColumnElement[Any]]:
    here = ManifestModel.fingerprint_id == fp_id
    return {
        "entries": func.count(func.distinct(ManifestModel.name)),
        "here": func.count(case((here, 1))),
        "built": func.count(case((and_(here, ManifestModel.kind != KIND_CAPTURED), 1))),
        "captured": func.count(case((and_(here, ManifestModel.kind == KIND_CAPTURED), 1))),
    }


def _models(conn: Connection, f: MatrixFilter) -> list[str]:
    """The models the matrix pages over. Unfiltered, an index-only scan of (backend, model); a status,
    mode or dtype filter aggregates the backend's rows per model instead (slower, still one query)."""
    if f.status is None and f.mode is None and f.dtype is None:
        query = (select(ManifestModel.model).where(ManifestModel.backend == f.backend, SPECCED).distinct()
                 .order_by(ManifestModel.model))
        if f.model is not None:
            query = query.where(ManifestModel.model == f.model)
        return [str(m) for m in conn.scalars(query)]
    agg = _aggregates(f.fingerprint_id)
    having = {"built": agg["built"] > 0, "missing": agg["entries"] > agg["here"],
              "captured": agg["captured"] > 0}.get(f.status or "")
    grouped = (select(ManifestModel.model).where(*_row_filter(f)).group_by(ManifestModel.model)
               .order_by(ManifestModel.model))
    return [str(m) for m in conn.scalars(grouped if having is None else grouped.having(having))]


def matrix(conn: Connection, f: MatrixFilter) -> Matrix:
    """One page of models; a row per (model, component, mode, dtype), a cell per shape, each cell counted
    over every toolchain of the backend (so "missing" means: built elsewhere, not here)."""
    models = _models(conn, f)
    page = models[(f.page - 1) * f.per_page:f.page * f.per_page]
    if not page:
        return Matrix((), (), has_next=False)
    agg = _aggregates(f.fingerprint_id)
    here = ManifestModel.fingerprint_id == f.fingerprint_id
    keys = (ManifestModel.model, ManifestModel.component, ManifestModel.mode, ManifestModel.dtype)
    dims = (ManifestModel.height, ManifestModel.width, ManifestModel.batch)
    cells_q = (select(*keys, *dims, *[a.label(n) for n, a in agg.items()],
                      func.sum(case((here, ManifestModel.total_size))).label("size"),
                      func.sum(case((here, _seconds()))).label("seconds"))
               .where(*_row_filter(f), ManifestModel.model.in_(page))
               .group_by(*keys, *dims))
    cells: dict[tuple[str, str, str, str], dict[str, Cell]] = {}
    shapes: set[tuple[int, int, int]] = set()
    for r in conn.execute(cells_q):
        status = _cell_status(r.entries, r.here, r.built, r.captured)
        row = cells.setdefault((str(r.model), str(r.component), str(r.mode), str(r.dtype)), {})
        if f.status and status != f.status and not (f.status == "missing" and status == "partial"):
            continue
        shape = (r.height or 0, r.width or 0, r.batch or 0)
        shapes.add(shape)
        label = "{}x{}x{}".format(*shape)
        row[label] = Cell(label, status, r.entries, r.here, int(r.size or 0),
                          None if r.seconds is None else round(float(r.seconds), 1))
    rows = tuple(MatrixRow(*k, cells=v) for k, v in sorted(cells.items()) if v or not f.status)
    return Matrix(rows, tuple("{}x{}x{}".format(*s) for s in sorted(shapes)), len(models) > f.page * f.per_page)


@dataclass(frozen=True)
class FingerprintDetail:
    entries: int
    captured: int
    shared: int
    size: int
    captured_size: int
    captured_latest: datetime | None
    modes: tuple[str, ...]     # of its entries: what the mode and dtype filters offer
    dtypes: tuple[str, ...]


def fingerprint_detail(conn: Connection, fp_id: str) -> FingerprintDetail:
    """One toolchain's manifests by kind, and its entries' modes and dtypes: one range of the
    (fingerprint_id, name) index, grouped (no scan of other toolchains' rows)."""
    rows = conn.execute(
        select(ManifestModel.kind, ManifestModel.mode, ManifestModel.dtype, func.count().label("n"),
               func.coalesce(func.sum(ManifestModel.total_size), 0).label("size"),
               func.max(ManifestModel.created_at).label("latest"))
        .where(ManifestModel.fingerprint_id == fp_id)
        .group_by(ManifestModel.kind, ManifestModel.mode, ManifestModel.dtype)).all()

    def total(kind: str, column: str = "n") -> int:
        return sum(int(getattr(r, column)) for r in rows if r.kind == kind)

    latest = [r.latest for r in rows if r.kind == KIND_CAPTURED and r.latest is not None]
    return FingerprintDetail(
        entries=total(KIND_ENTRY), captured=total(KIND_CAPTURED), shared=total(KIND_SHARED),
        size=sum(int(r.size) for r in rows), captured_size=total(KIND_CAPTURED, "size"),
        captured_latest=aware(max(latest)) if latest else None,
        modes=tuple(sorted({str(r.mode) for r in rows if r.mode is not None})),
        dtypes=tuple(sorted({str(r.dtype) for r in rows if r.dtype is not None})))


def filter_choices(conn: Connection, backend: str, detail: FingerprintDetail) -> dict[str, list[str]]:
    """What the filter drop-downs offer: the backend's models (an index-only scan), the chosen
    toolchain's modes and dtypes (from its detail): no full scan on the first view."""
    models = conn.scalars(select(ManifestModel.model).where(ManifestModel.backend == backend, SPECCED).distinct()
                          .order_by(ManifestModel.model))
    return {"model": [str(m) for m in models], "mode": list(detail.modes), "dtype": list(detail.dtypes)}


# --- queue and publishes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class JobView:
    fingerprint_id: str
    entry_key: str
    status: str
    worker: str | None
    attempts: int
    lease_expires_at: datetime | None
    lease_left_s: float | None     # negative: expired (claimable again)
    updated_at: datetime


@dataclass(frozen=True)
class WorkerView:
    worker: str
    running: int
    lease_expires_at: datetime | None


@dataclass(frozen=True)
class QueueView:
    counts: dict[str, int]
    active: tuple[JobView, ...]      # running first, then pending; at most `limit`
    workers: tuple[WorkerView, ...]


def queue_view(conn: Connection, limit: int = 50) -> QueueView:
    by_status = select(BuildJobModel.status, func.count()).group_by(BuildJobModel.status)
    counts = {s: n for s, n in conn.execute(by_status)}
    at = now()
    jobs_q = (select(BuildJobModel).where(BuildJobModel.status.in_(("running", "pending")))
              .order_by(case((BuildJobModel.status == "running", 0), else_=1), BuildJobModel.lease_expires_at,
                        BuildJobModel.updated_at).limit(limit))
    active = tuple(JobView(r.fingerprint_id, r.entry_key, r.status, r.worker, r.attempts,
                           aware(r.lease_expires_at) if r.lease_expires_at else None,
                           (aware(r.lease_expires_at) - at).total_seconds() if r.lease_expires_at else None,
                           aware(r.updated_at))
                   for r in conn.execute(jobs_q))
    workers_q = (select(BuildJobModel.worker, func.count().label("running"),
                        func.max(BuildJobModel.lease_expires_at).label("lease"))
                 .where(BuildJobModel.status == "running", BuildJobModel.worker.is_not(None))
                 .group_by(BuildJobModel.worker).order_by(BuildJobModel.worker).limit(limit))
    workers = tuple(WorkerView(r.worker, r.running, aware(r.lease) if r.lease else None)
                    for r in conn.execute(workers_q))
    return QueueView(counts, active, workers)


@dataclass(frozen=True)
class Publish:
    fingerprint_id: str
    key: str
    kind: str
    label: str
    size: int
    seconds: float | None
    created_at: datetime


def recent_publishes(conn: Connection, fp_id: str | None = None, limit: int = 20) -> list[Publish]:
    """The latest manifests, of one toolchain (a range of its index) or of all (a full scan: there is no
    index on created_at)."""
    query = (select(ManifestModel.fingerprint_id, ManifestModel.name, ManifestModel.kind, *_LABEL_COLUMNS,
                    ManifestModel.total_size, ManifestModel.created_at, _seconds().label("seconds"))
             .order_by(ManifestModel.created_at.desc(), ManifestModel.name).limit(limit))
    if fp_id is not None:
        query = query.where(ManifestModel.fingerprint_id == fp_id)
    return [Publish(r.fingerprint_id, r.name, r.kind, _label(r) if r.model else r.name, int(r.total_size),
                    None if r.seconds is None else float(r.seconds), aware(r.created_at))
            for r in conn.execute(query)]


def fingerprint_summaries(conn: Connection) -> list[dict[str, Any]]:
    """Per toolchain: backend, manifests and captured sets, counted on the (fingerprint_id, name) index
    alone (captured sets are named captured/<hash>): no table scan on the first view."""
    backends = _backends(conn)
    captured = func.count(case((ManifestModel.name.startswith(CAPTURED_DIR, autoescape=True), 1)))
    counts = conn.execute(select(ManifestModel.fingerprint_id, func.count(), captured)
                          .group_by(ManifestModel.fingerprint_id)).all()
    found = {fp_id: (int(n), int(c)) for fp_id, n, c in counts}
    return [{"id": fp_id, "backend": backend, "manifests": found.get(fp_id, (0, 0))[0],
             "captured": found.get(fp_id, (0, 0))[1]} for fp_id, backend in sorted(backends.items())]


def metric_counts(conn: Connection) -> tuple[list[dict[str, Any]], dict[str, int], int]:
    """The dashboard's /metrics (observability/metrics.py): per toolchain its backend, prebuilt entries and
    captured sets (by manifest kind); queue jobs by status; running jobs whose lease has expired."""
    backends = _backends(conn)
    kinds = conn.execute(select(ManifestModel.fingerprint_id, func.count(case((ManifestModel.kind == KIND_ENTRY, 1))),
                                func.count(case((ManifestModel.kind == KIND_CAPTURED, 1))))
                         .group_by(ManifestModel.fingerprint_id)).all()
    found = {fp_id: (int(e), int(c)) for fp_id, e, c in kinds}
    toolchains = [{"id": fp_id, "backend": backend, "entries": found.get(fp_id, (0, 0))[0],
                   "captured": found.get(fp_id, (0, 0))[1]} for fp_id, backend in sorted(backends.items())]
    queue = {str(s): int(n) for s, n in conn.execute(select(BuildJobModel.status, func.count())
                                                      .group_by(BuildJobModel.status))}
    at = clock(conn)   # the time the queue compares leases by (the database's on Postgres)
    expired = conn.execute(select(func.count()).where(BuildJobModel.status == "running",
                                                      BuildJobModel.lease_expires_at < at)).scalar()
    return toolchains, queue, int(expired or 0)


def _backends(conn: Connection) -> dict[str, str]:
    """Every toolchain's backend, by fingerprint id."""
    return {fp_id: backend for fp_id, backend in conn.execute(select(FingerprintModel.id, FingerprintModel.backend))}

"""The distributed build queue: N workers on N machines build each (fingerprint, entry) once.

A claim leases one job: on Postgres `SELECT … FOR UPDATE SKIP LOCKED` lets concurrent workers pass
over each other's rows; on SQLite the caller's transaction is BEGIN IMMEDIATE, which serializes them.
A worker that dies stops renewing; once its lease expires the job is claimable again. `attempts`
grows with every claim and fences the old holder out (its renew/fail no longer match the row).
Lease times come from one clock: the database server's on Postgres (workers' own clocks may drift), this
host's on SQLite. Leases are short (30 s by default) and a heartbeat renews them while a build runs.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable, Collection, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Row, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from .models import JOB_STATUSES, BuildJobModel
from .rows import Claim, JobRow

ERROR_TAIL = 8000   # characters of a failure's log kept in last_error
CHUNK = 500         # keys per IN (...): far below SQLite's and Postgres' parameter limits


def now() -> datetime:
    return datetime.now(UTC)


def clock(conn: Connection) -> datetime:
    """The time leases are set and compared by: the database server's on Postgres, so workers on many
    machines agree however their own clocks drift; this host's on SQLite (one host's file)."""
    if conn.dialect.name == "postgresql":
        return aware(conn.execute(select(func.now())).scalar_one())
    return now()


def aware(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; every time we store is UTC.
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def enqueue(conn: Connection, jobs: Iterable[tuple[str, str, str]]) -> int:
    at = now()
    unique = {(fp, key): payload for fp, key, payload in jobs}
    if not unique:
        return 0
    rows = [{"fingerprint_id": fp, "entry_key": key, "spec": payload, "status": "pending", "attempts": 0,
             "updated_at": at} for (fp, key), payload in unique.items()]
    ins = (postgresql.insert(BuildJobModel) if conn.dialect.name == "postgresql" else sqlite.insert(BuildJobModel))
    # RETURNING lists only the rows actually inserted; existing jobs (any status) stay as they are.
    stmt = ins.on_conflict_do_nothing().returning(BuildJobModel.entry_key)
    return len(conn.execute(stmt, rows).all())


def requeue(conn: Connection, keys: Iterable[tuple[str, str]]) -> int:
    """Back to pending: finished or failed jobs whose artifacts are not in the store (a new prebuild run
    retries failures; a GC'd entry is rebuilt). Running jobs belong to their holder and stay."""
    by_fp: dict[str, set[str]] = {}
    for fp, key in keys:
        by_fp.setdefault(fp, set()).add(key)
    n = 0
    at = now()
    for fp, wanted in sorted(by_fp.items()):
        ordered = sorted(wanted)
        for i in range(0, len(ordered), CHUNK):   # one statement per chunk, not one per job
            res = conn.execute(update(BuildJobModel)
                               .where(BuildJobModel.fingerprint_id == fp,
                                      BuildJobModel.entry_key.in_(ordered[i:i + CHUNK]),
                                      BuildJobModel.status.in_(("done", "failed")))
                               .values(status="pending", lease_expires_at=None, updated_at=at))
            n += res.rowcount
    return n


@functools.cache
def host_identity() -> str:
    """This host as a claim records it: the hostname and the pid namespace, so a recorded pid is checked
    only where it names the same process (two containers may share a hostname, never a pid namespace)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")    # 'pid:[4026531836]'
    except OSError:
        namespace = ""
    return f"{socket.gethostname()} {namespace}".strip()[:255]


def pid_alive(pid: int) -> bool:
    """Whether a process of that pid runs here (a zombie does not: it has exited, unreaped). A reused pid
    reads as alive: the lease's expiry still frees the job then, as for a worker on another host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def reap_local(conn: Connection, host: str, alive: Callable[[int], bool] = pid_alive) -> int:
    """Jobs held by a process on this host that is gone (SIGKILL, a crash, an OOM kill) go back to pending
    now: waiting out their lease would make the next run on this host report its own dead claims as
    "still being built". Fenced like `fail`: only the row as that holder left it."""
    rows = conn.execute(select(BuildJobModel.fingerprint_id, BuildJobModel.entry_key, BuildJobModel.attempts,
                               BuildJobModel.holder_pid)
                        .where(BuildJobModel.status == "running", BuildJobModel.holder_host == host,
                               BuildJobModel.holder_pid.is_not(None))).all()
    n = 0
    for r in rows:
        if alive(int(r.holder_pid)):
            continue
        res = conn.execute(update(BuildJobModel)
                           .where(_pk(r.fingerprint_id, r.entry_key), BuildJobModel.status == "running",
                                  BuildJobModel.attempts == r.attempts, BuildJobModel.holder_host == host,
                                  BuildJobModel.holder_pid == r.holder_pid)
                           .values(status="pending", lease_expires_at=None, updated_at=now(),
                                   last_error=f"its worker (pid {r.holder_pid} on this host) is gone"))
        n += res.rowcount
    return n


def claim(conn: Connection, worker: str, lease_s: float, fingerprint_id: str | None,
          exclude: Collection[str] = ()) -> Claim | None:
    host = host_identity()
    reap_local(conn, host)
    at = clock(conn)
    claimable = or_(BuildJobModel.status == "pending",
                    (BuildJobModel.status == "running") & (BuildJobModel.lease_expires_at < at))
    query = (select(BuildJobModel.fingerprint_id, BuildJobModel.entry_key, BuildJobModel.attempts, BuildJobModel.spec)
             .where(claimable))
    if fingerprint_id is not None:
        query = query.where(BuildJobModel.fingerprint_id == fingerprint_id)
    if exclude:   # jobs this worker already refused (a payload of another version)
        query = query.where(BuildJobModel.entry_key.not_in(sorted(exclude)))
    # Fewest attempts first, so a job that keeps failing does not starve the rest.
    query = (query.order_by(BuildJobModel.attempts, BuildJobModel.updated_at).limit(1)
             .with_for_update(skip_locked=True))
    row = conn.execute(query).first()
    if row is None:
        return None
    expires = at + timedelta(seconds=lease_s)
    attempts = row.attempts + 1
    conn.execute(update(BuildJobModel).where(_pk(row.fingerprint_id, row.entry_key))
                 .values(status="running", worker=worker, lease_expires_at=expires, attempts=attempts,
                         updated_at=at, holder_host=host, holder_pid=os.getpid()))
    return Claim(row.fingerprint_id, row.entry_key, row.spec, worker, attempts, expires)


def renew(conn: Connection, c: Claim, lease_s: float) -> bool:
    at = clock(conn)
    res = conn.execute(update(BuildJobModel).where(_held(c)).values(lease_expires_at=at + timedelta(seconds=lease_s),
                                                         updated_at=at))
    return res.rowcount == 1


def finish(conn: Connection, c: Claim, manifest_digest: str) -> None:
    # Not fenced: the manifest is published whoever held the lease last, so the job is done either way.
    conn.execute(update(BuildJobModel).where(_pk(c.fingerprint_id, c.entry_key), BuildJobModel.status != "done")
                 .values(status="done", worker=c.worker, lease_expires_at=None, manifest_digest=manifest_digest,
                         updated_at=now()))


def fail(conn: Connection, c: Claim, error: str, retry: bool) -> bool:
    """False when the lease was lost: the current holder decides the job's fate, not us."""
    res = conn.execute(update(BuildJobModel).where(_held(c))
                       .values(status="pending" if retry else "failed", lease_expires_at=None,
                               last_error=error[-ERROR_TAIL:], updated_at=now()))
    return res.rowcount == 1


def counts(conn: Connection, fingerprint_id: str | None) -> dict[str, int]:
    query = select(BuildJobModel.status, func.count()).group_by(BuildJobModel.status)
    if fingerprint_id is not None:
        query = query.where(BuildJobModel.fingerprint_id == fingerprint_id)
    result = dict.fromkeys(JOB_STATUSES, 0)
    result.update({status: n for status, n in conn.execute(query)})
    return result


def jobs(conn: Connection, fingerprint_id: str | None, status: str | None) -> list[JobRow]:
    query = select(BuildJobModel).order_by(BuildJobModel.fingerprint_id, BuildJobModel.entry_key)
    if fingerprint_id is not None:
        query = query.where(BuildJobModel.fingerprint_id == fingerprint_id)
    if status is not None:
        query = query.where(BuildJobModel.status == status)
    return [_job_row(r) for r in conn.execute(query)]


def states(conn: Connection, fingerprint_id: str, keys: list[str]) -> list[JobRow]:
    """The jobs of these entry keys (one chunk: the caller keeps `keys` short)."""
    query = select(BuildJobModel).where(BuildJobModel.fingerprint_id == fingerprint_id,
                                        BuildJobModel.entry_key.in_(keys))
    return [_job_row(r) for r in conn.execute(query)]


def _job_row(r: Row[Any]) -> JobRow:
    return JobRow(r.fingerprint_id, r.entry_key, r.spec, r.status, r.worker,
                  aware(r.lease_expires_at) if r.lease_expires_at else None, r.attempts, r.last_error,
                  r.manifest_digest, aware(r.updated_at))


def _pk(fingerprint_id: str, entry_key: str) -> Any:
    return (BuildJobModel.fingerprint_id == fingerprint_id) & (BuildJobModel.entry_key == entry_key)


def _held(c: Claim) -> Any:
    return (_pk(c.fingerprint_id, c.entry_key) & (BuildJobModel.status == "running")
            & (BuildJobModel.worker == c.worker) & (BuildJobModel.attempts == c.attempts))

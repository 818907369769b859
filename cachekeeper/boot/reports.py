"""Miss reports: what serving hosts of one toolchain served and compiled, batched, under `reports/`.

    watch(pipe) ─▶ spool (JSON lines, local) ─▶ `cachekeeper report` ─▶ reports/<fp>/<t>-<host>-<n>.json
                                                                        ─▶ `suggest` / `stats` / dashboard

A report is a public format (schema version `v`): one JSON object per host and interval, at most
MAX_REPORT_BYTES, with the host's toolchain fingerprint, a row per (model, shape, graph arguments):
calls, calls that compiled, estimated compile seconds, wall seconds. The host is named by a hash of its
name. Writing one is the only store write a server-role identity may make (deploy/policies/). A reader
skips, with one line each, a report of another schema, of another toolchain than its key says, or over
the bound: reports are advice from the least-trusted machines, never an input that can fail a run.
Imports no torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import IntegrityError, ObjectNotFound
from ..format.layout import ReportKey, parse_report_key, report_key, report_prefix
from ..format.spool import SPOOL_SUFFIX, CallRecord

if TYPE_CHECKING:
    from ..stores.base import Store

SCHEMA = 1
KIND = "cachekeeper.report"
MAX_REPORT_BYTES = 64 << 10    # a busy host's interval fits: rows are per distinct call, not per call
RECENT_S = 7 * 86_400.0        # reports older than this say nothing of today's traffic (traffic, hot first)
MAX_ROWS = 200                 # more distinct calls in one interval are counted in `dropped`, not listed
CLAIMED = ".claimed"           # a spool file `report` renamed for itself; kept until its report is stored
STAMP = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class Row:
    model: str
    height: int
    width: int
    batch: int
    guidance: float | None
    max_sequence_length: int | None
    calls: int
    compiled: int             # calls that compiled something
    compile_s: float          # wall time those calls spent above an uncompiled call of the same row
    wall_s: float

    @property
    def shape(self) -> str:
        return f"{self.height}x{self.width}x{self.batch}"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Report:
    fingerprint_id: str
    backend: str
    host: str                 # 16 hex: sha256 of the host name
    start: float              # unix seconds: the first and last call counted
    end: float
    rows: tuple[Row, ...]
    dropped: int = 0          # distinct calls left out (MAX_ROWS), and calls without a shape
    v: int = SCHEMA

    def to_json(self) -> bytes:
        doc = {"v": self.v, "kind": KIND, "fingerprint_id": self.fingerprint_id, "backend": self.backend,
               "host": self.host, "start": self.start, "end": self.end, "dropped": self.dropped,
               "rows": [r.to_dict() for r in self.rows]}
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def host_id(name: str | None = None) -> str:
    return hashlib.sha256((name or socket.gethostname()).encode()).hexdigest()[:16]


# --- building a report from call records (pure) ------------------------------------------------------


def aggregate(records: Iterable[CallRecord]) -> tuple[list[Row], int]:
    """(rows sorted by calls, records left out): one row per distinct graph-changing call."""
    groups: dict[tuple[Any, ...], list[CallRecord]] = {}
    dropped = 0
    for r in records:
        if r.height is None or r.width is None or not r.model:
            dropped += 1   # no shape: nothing a config could add
            continue
        groups.setdefault((r.model, r.height, r.width, r.batch, r.guidance, r.max_sequence_length), []).append(r)
    rows = [_row(k, rs) for k, rs in groups.items()]
    rows.sort(key=lambda r: (-r.compiled, -r.calls, r.model, r.shape))
    dropped += sum(r.calls for r in rows[MAX_ROWS:])
    return rows[:MAX_ROWS], dropped


def _row(key: tuple[Any, ...], records: list[CallRecord]) -> Row:
    compiled = [r.wall_s for r in records if r.compiled]
    plain = [r.wall_s for r in records if not r.compiled]
    # A compiling call's cost is its wall time above a call that did not compile (the serving work itself);
    # with no such call to compare with, the whole wall time counts (an upper bound).
    base = sum(plain) / len(plain) if plain else 0.0
    model, height, width, batch, guidance, max_len = key
    return Row(model, height, width, batch, guidance, max_len, calls=len(records), compiled=len(compiled),
               compile_s=round(sum(max(0.0, w - base) for w in compiled), 3),
               wall_s=round(sum(r.wall_s for r in records), 3))


def build_report(records: list[CallRecord], fingerprint_id: str, backend: str, host: str | None = None) -> Report:
    rows, dropped = aggregate(records)
    times = [r.time for r in records] or [time.time()]
    report = Report(fingerprint_id, backend, host or host_id(), min(times), max(times), tuple(rows), dropped)
    while len(report.to_json()) > MAX_REPORT_BYTES and report.rows:   # long model names: trim the tail
        report = Report(report.fingerprint_id, report.backend, report.host, report.start, report.end,
                        report.rows[:-1], report.dropped + report.rows[-1].calls)
    return report


# --- the spool: claim, read, release ---------------------------------------------------------------


@dataclass
class Claim:
    """Spool files this reporter took (renamed), their records, and the lines it could not read."""

    files: list[Path] = field(default_factory=list)
    records: list[CallRecord] = field(default_factory=list)
    unreadable: int = 0

    def release(self) -> None:
        """The report is stored: the records are spent."""
        for f in self.files:
            f.unlink(missing_ok=True)


def claim(spool: Path) -> Claim:
    """Take every spool file: a writer's next record goes to a new file of the same name, so nothing a
    serving process appends after this is lost. Files claimed by an earlier round that failed are
    taken again (their report was never stored)."""
    out = Claim()
    if not spool.is_dir():
        return out
    for path in sorted(spool.iterdir()):
        if path.name.startswith(".") or not (path.name.endswith(SPOOL_SUFFIX) or CLAIMED in path.name):
            continue
        if CLAIMED not in path.name:
            taken = path.with_name(f"{path.name}{CLAIMED}.{os.getpid()}.{time.time_ns()}")
            try:
                os.rename(path, taken)
            except FileNotFoundError:
                continue
            path = taken
        out.files.append(path)
        for line in path.read_bytes().splitlines():
            try:
                record = CallRecord.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError):
                out.unreadable += 1
                continue
            if record.v == CallRecord.v:
                out.records.append(record)
            else:
                out.unreadable += 1
    return out


def write_report(store: Store, report: Report) -> str:
    """Store the report under reports/<fp>/; the key is new each time (objects are write-once)."""
    stamp = datetime.fromtimestamp(report.end, UTC).strftime(STAMP)
    n = time.time_ns() % 1_000_000_000
    key = report_key(report.fingerprint_id, stamp, report.host, n)
    store.put_bytes(key, report.to_json())
    return key


# --- reading reports back ----------------------------------------------------------------------------


def decode(data: bytes, rk: ReportKey) -> Report | str:
    """The report, or why it is skipped (one line)."""
    where = f"report {rk.key}"
    if len(data) > MAX_REPORT_BYTES:
        return f"{where} is {len(data)} bytes, over the {MAX_REPORT_BYTES}-byte bound; skipped"
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            return f"{where} is not a cachekeeper report; skipped"
        if doc.get("v") != SCHEMA:
            return f"{where} has schema version {doc.get('v')!r} (this cachekeeper reads {SCHEMA}); skipped"
        if doc.get("fingerprint_id") != rk.fingerprint_id:
            return (f"{where} is of toolchain {doc.get('fingerprint_id')!r}, not the {rk.fingerprint_id} "
                    "its key names; skipped")
        rows = tuple(Row(model=str(r["model"]), height=int(r["height"]), width=int(r["width"]),
                         batch=int(r["batch"]), guidance=None if r.get("guidance") is None else float(r["guidance"]),
                         max_sequence_length=None if r.get("max_sequence_length") is None
                         else int(r["max_sequence_length"]), calls=int(r["calls"]), compiled=int(r["compiled"]),
                         compile_s=float(r["compile_s"]), wall_s=float(r["wall_s"])) for r in doc["rows"])
        return Report(rk.fingerprint_id, str(doc["backend"]), str(doc["host"]), float(doc["start"]),
                      float(doc["end"]), rows, int(doc.get("dropped", 0)))
    except (ValueError, KeyError, TypeError):
        return f"{where} is malformed; skipped"


def serving_batches(batch: int) -> tuple[int, int]:
    """The entry batches that serve a call of `batch` images: as served, or doubled (classifier-free
    guidance compiles 2 x the images per prompt). `stats --traffic`, `suggest` and hot first agree on it."""
    return batch, 2 * batch


def since_stamp(seconds: float, now: float | None = None) -> str:
    return datetime.fromtimestamp((time.time() if now is None else now) - seconds, UTC).strftime(STAMP)


def report_keys(store: Store, fingerprint_id: str | None = None, since: str = "") -> Iterator[ReportKey]:
    """Report keys (of one toolchain) stamped at or after `since` (a STAMP string), without reading them."""
    for key in store.list(report_prefix(fingerprint_id)):
        rk = parse_report_key(key)
        if rk is not None and rk.stamp >= since:
            yield rk


def read_reports(store: Store, fingerprint_id: str | None = None, since: str = "",
                 newest: int | None = None) -> tuple[list[Report], list[str]]:
    """(reports, one line per report skipped), oldest first; with `newest`, only that many of the latest.
    Each object is read with a size cap, so a planted giant costs a bounded read."""
    from ..stores.reader import read_bytes

    reports: list[Report] = []
    skipped: list[str] = []
    keys = sorted(report_keys(store, fingerprint_id, since))   # oldest first, whatever the listing order
    for rk in keys[-newest:] if newest else keys:
        try:
            data = read_bytes(store, rk.key, limit=MAX_REPORT_BYTES)
        except ObjectNotFound:
            continue   # removed since the listing (gc)
        except IntegrityError:
            skipped.append(f"report {rk.key} is over the {MAX_REPORT_BYTES}-byte bound; skipped")
            continue
        got = decode(data, rk)
        (reports if isinstance(got, Report) else skipped).append(got)  # type: ignore[arg-type]
    return reports, skipped


__all__ = ["MAX_REPORT_BYTES", "RECENT_S", "SCHEMA", "Claim", "Report", "Row", "aggregate", "build_report", "claim",
           "decode", "read_reports", "report_keys", "serving_batches", "since_stamp", "write_report"]

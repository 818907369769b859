"""Miss reports: what serving hosts of one toolchain served and compiled, batched, under `reports/`.

    watch(pipe) ─▶ spool (JSON lines, local) ─▶ `cachekeeper report` ─▶ reports/<fp>/<t>-<host>-<n>.json
                                                                        ─▶ `suggest` / `stats` / dashboard

A report is a public format (schema version `v`): one JSON object per host and interval, at most
MAX_REPORT_BYTES, with the host's toolchain fingerprint, a row per (model, shape, graph arguments):
calls, calls that compiled, estimated compile seconds, wall seconds, and (an optional key) the compiled calls by
the compile ledger's reason (reports/compiles.py). The host is named by a hash of its
name. Writing one is the only store write a server-role identity may make (deploy/policies/). Reports and
spool records are advice from the least-trusted machines, never an input that can fail a run: every field is
checked where it is read (format/spool.py: JSON type, finiteness, range, names, size), a report of another
schema, of another toolchain than its key says, over the bound or with a bad field is skipped with one line
naming it, and a spool file with anything `claim` cannot use is one line and set aside (`*.bad`).
Imports no torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..bounds import SIZE
from ..errors import IntegrityError, ObjectNotFound
from ..format.layout import ReportKey, parse_report_key, report_key, report_prefix
from ..format.spool import (
    CALL_TIME,
    CALLS,
    GUIDANCE,
    MAX_SPOOL_BYTES,
    SECONDS,
    SEQUENCE,
    SPOOL_SUFFIX,
    CallRecord,
    Refused,
    loads,
    name,
    number,
    optional,
    show,
)
from .compiles import parse_line, reason_counts, reasons_of, reasons_to_json

if TYPE_CHECKING:
    from ..stores.base import Store

SCHEMA = 1
KIND = "cachekeeper.report"
MAX_REPORT_BYTES = 64 << 10    # a busy host's interval fits: rows are per distinct call, not per call
RECENT_S = 7 * 86_400.0        # reports older than this say nothing of today's traffic (traffic, hot first)
MAX_ROWS = 200                 # more distinct calls in one interval are counted in `dropped`, not listed
CLAIMED = ".claimed"           # a spool file `report` renamed for itself; kept until its report is stored
BAD = ".bad"                   # a spool file set aside: it held what this reporter cannot read; never taken again
MAX_ASIDE = 16                 # spool files kept set aside (the newest); older ones are removed
MAX_CLAIM_BYTES = 64 << 20     # read by one round; more waits for the next
_HOST = re.compile(r"[0-9a-f]{16}")
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
    # The compiled calls by the ledger's reason (reports/compiles.py): (reason, calls, compile_s), sorted. An
    # optional key of the row (absent when nothing compiled, and in reports written before it).
    reasons: tuple[tuple[str, int, float], ...] = ()

    @property
    def shape(self) -> str:
        return f"{self.height}x{self.width}x{self.batch}"

    def to_dict(self) -> dict[str, Any]:
        doc = {k: v for k, v in self.__dict__.items() if k != "reasons"}
        return {**doc, "reasons": reasons_to_json(self.reasons)} if self.reasons else doc


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
               wall_s=round(sum(r.wall_s for r in records), 3), reasons=reason_counts(records, base))


def build_report(records: list[CallRecord], fingerprint_id: str, backend: str, host: str | None = None) -> Report:
    rows, dropped = aggregate(records)
    times = [r.time for r in records] or [time.time()]
    report = Report(fingerprint_id, backend, host or host_id(), min(times), max(times), tuple(rows), dropped)
    while len(report.to_json()) > MAX_REPORT_BYTES and report.rows:   # long model names: trim the tail
        report = Report(report.fingerprint_id, report.backend, report.host, report.start, report.end,
                        report.rows[:-1], report.dropped + report.rows[-1].calls)
    return report


# --- the spool: claim, read, set aside ------------------------------------------------------------


@dataclass
class Claim:
    """Spool files this reporter took (renamed), their good records, and one warning line per file that
    held anything else. A file with a bad record is set aside (`*.bad`), never retried: its good records
    are reported once, and its bytes are kept for whoever wants to see what the serving host wrote."""

    files: list[Path] = field(default_factory=list)
    records: list[CallRecord] = field(default_factory=list)
    unreadable: int = 0       # records skipped
    warnings: list[str] = field(default_factory=list)
    aside: list[Path] = field(default_factory=list)

    def release(self) -> None:
        """The report is stored: the records are spent."""
        for f in self.files:
            if f in self.aside:
                set_aside(f)
            else:
                f.unlink(missing_ok=True)


def set_aside(path: Path) -> str:
    """Rename a spool file `<name>.<ns>.bad` (claim never takes it again), keep only the newest MAX_ASIDE
    of those, and say where it went."""
    target = path.with_name(f"{path.name.split(CLAIMED)[0]}.{time.time_ns()}{BAD}")
    try:
        os.rename(path, target)
    except OSError:   # it cannot be renamed: removing it is the other way never to take it again
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
        return "removed"
    with contextlib.suppress(OSError):
        aside = sorted((p for p in path.parent.iterdir() if p.name.endswith(BAD)), key=_set_aside_at)
        for old in aside[:-MAX_ASIDE]:
            with contextlib.suppress(OSError):
                old.unlink()
    return f"set aside as {show(target.name, 120)}"


def _set_aside_at(path: Path) -> int:
    stamp = path.name[:-len(BAD)].rpartition(".")[2]
    return int(stamp) if stamp.isdigit() else 0


def _read_spool_file(path: Path) -> bytes:
    """The file's bytes: a regular file (no link, no FIFO) within MAX_SPOOL_BYTES; Refused otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise Refused(f"cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("is not a regular file")
        if st.st_size > MAX_SPOOL_BYTES:
            raise Refused(f"is {st.st_size} bytes, over the {MAX_SPOOL_BYTES}-byte bound")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > MAX_SPOOL_BYTES:
                raise Refused(f"grew over the {MAX_SPOOL_BYTES}-byte bound")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise Refused(f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def claim(spool: Path) -> Claim:
    """Take spool files (at most MAX_CLAIM_BYTES a round; the rest wait for the next): a writer's next record
    goes to a new file of the same name, so nothing a serving process appends after this is lost. Files
    claimed by an earlier round that failed are taken again (their report was never stored). Every record
    is checked (CallRecord.parse); a file that cannot be read, or that holds a bad record, gets one warning
    line and is set aside."""
    out = Claim()
    if not spool.is_dir():
        return out
    try:
        names = sorted(p.name for p in spool.iterdir())
    except OSError as exc:
        out.warnings.append(f"spool {spool} cannot be listed ({exc.strerror or exc}); nothing taken")
        return out
    taken_bytes = 0
    for entry in names:
        if taken_bytes >= MAX_CLAIM_BYTES:
            break
        if entry.startswith(".") or entry.endswith(BAD) or not (entry.endswith(SPOOL_SUFFIX) or CLAIMED in entry):
            continue
        path = spool / entry
        where = f"spool file {show(str(path), 160)}"
        if CLAIMED not in entry:
            taken = path.with_name(f"{entry}{CLAIMED}.{os.getpid()}.{time.time_ns()}")
            try:
                os.rename(path, taken)
            except FileNotFoundError:
                continue
            except OSError as exc:
                out.warnings.append(f"{where} cannot be taken ({exc.strerror or exc}); left in place")
                continue
            path = taken
        try:
            data = _read_spool_file(path)
        except Refused as exc:
            out.warnings.append(f"{where} {exc}; {set_aside(path)}")
            continue
        taken_bytes += len(data)
        out.files.append(path)
        bad, first = 0, ""
        lines = data.splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.records.append(parse_line(line))
            except Refused as exc:
                bad += 1
                first = first or f"line {n}: {exc}"
        if bad:
            out.unreadable += bad
            out.aside.append(path)
            out.warnings.append(f"{where}: {bad} of {len([ln for ln in lines if ln.strip()])} records skipped "
                                f"({first}); set aside once reported")
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
    """The report, or why it is skipped (one line naming the object). Every field is checked: JSON type,
    finiteness, range (a row's shape within bounds.SIZE), and the whole within MAX_REPORT_BYTES."""
    where = f"report {rk.key}"
    if len(data) > MAX_REPORT_BYTES:
        return f"{where} is {len(data)} bytes, over the {MAX_REPORT_BYTES}-byte bound; skipped"
    try:
        doc = loads(data)
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            return f"{where} is not a cachekeeper report; skipped"
        if type(doc.get("v")) is not int or doc["v"] != SCHEMA:
            return f"{where} has schema version {show(doc.get('v'))} (this cachekeeper reads {SCHEMA}); skipped"
        if doc.get("fingerprint_id") != rk.fingerprint_id:
            return (f"{where} is of toolchain {show(doc.get('fingerprint_id'))}, not the {rk.fingerprint_id} "
                    "its key names; skipped")
        head = _head(doc)
    except Refused as exc:
        return f"{where}: {exc}; skipped"
    rows = doc.get("rows")
    if not isinstance(rows, list) or len(rows) > MAX_ROWS:
        return f"{where}: rows is not a list of at most {MAX_ROWS}; skipped"
    parsed: list[Row] = []
    for n, r in enumerate(rows, 1):
        try:
            parsed.append(_row_of(r))
        except Refused as exc:
            return f"{where}: row {n}: {exc}; skipped"
    backend, host, start, end, dropped = head
    return Report(rk.fingerprint_id, backend, host, start, end, tuple(parsed), dropped)


def _head(doc: dict[str, Any]) -> tuple[str, str, float, float, int]:
    host = doc.get("host")
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise Refused(f"host {show(host)} is not 16 hex digits")
    start, end = float(number(doc, "start", CALL_TIME)), float(number(doc, "end", CALL_TIME))
    dropped = int(number(doc, "dropped", CALLS)) if "dropped" in doc else 0
    return name(doc, "backend"), host, start, end, dropped


def _row_of(r: object) -> Row:
    if not isinstance(r, dict):
        raise Refused("not a JSON object")
    calls = int(number(r, "calls", CALLS))
    compiled = int(number(r, "compiled", CALLS))
    if compiled > calls:
        raise Refused(f"compiled {compiled} is more than its {calls} calls")
    guidance, max_len = optional(r, "guidance", GUIDANCE), optional(r, "max_sequence_length", SEQUENCE)
    return Row(model=name(r, "model"), height=int(number(r, "height", SIZE)), width=int(number(r, "width", SIZE)),
               batch=int(number(r, "batch", SIZE)), guidance=None if guidance is None else float(guidance),
               max_sequence_length=None if max_len is None else int(max_len), calls=calls, compiled=compiled,
               compile_s=float(number(r, "compile_s", SECONDS)), wall_s=float(number(r, "wall_s", SECONDS)),
               reasons=reasons_of(r, compiled))


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
        except IntegrityError as exc:   # over the bound, or (file://) not a regular file
            skipped.append(f"report {rk.key}: {exc}; skipped")
            continue
        got = decode(data, rk)
        (reports if isinstance(got, Report) else skipped).append(got)  # type: ignore[arg-type]
    return reports, skipped


__all__ = ["MAX_REPORT_BYTES", "RECENT_S", "SCHEMA", "Claim", "Report", "Row", "aggregate", "build_report", "claim",
           "decode", "read_reports", "report_keys", "serving_batches", "since_stamp", "write_report"]

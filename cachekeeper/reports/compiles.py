"""Why a serving call compiled: the compile ledger's record, as a serving process writes it beside a spool
line and `cachekeeper report` reads it back (into miss reports' rows and the `reason` label of the runtime
metrics).

A spool line (format/spool.py's CallRecord, version 1) of a call that compiled carries one more key:

    "compile": {"reason": "no_artifact", "graphs": 2, "seconds": 4.1, "source": "runtime", "backend": "inductor"}

A reader of version 1 that predates it ignores it (CallRecord reads the keys it knows), and a compiled call
without it is counted under `unknown`. Like every field a serving host writes, each one is checked where it is
read (`CompileInfo.parse`): a reason outside REASONS, a count or a time out of bounds is refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..bounds import Bound
from ..format.spool import CALLS, SECONDS, CallRecord, Refused, loads, name, number, show

# Why a call compiled (the ledger's `reason`; a Prometheus label value: a fixed set, so the label is bounded).
NO_ARTIFACT = "no_artifact"     # no artifact for this shape in the served dir
FINGERPRINT = "fingerprint"     # the entry's artifacts are in place, but the runtime's key did not take them
FALLBACK = "fallback"           # a precompiled function did not serve the call: its torch.compile fallback ran
RECOMPILE = "recompile"         # a guard failed (another shape or argument): Dynamo traced again, and missed
AUTOTUNE = "autotune"           # an autotune benchmark ran
NOT_HYDRATED = "not_hydrated"   # hot first: the call's entry is wanted but not placed yet (--ready-after)
UNKNOWN = "unknown"             # a compiled call whose record names no reason (an older writer)
REASONS = (NO_ARTIFACT, FINGERPRINT, FALLBACK, RECOMPILE, AUTOTUNE, NOT_HYDRATED)
LABELS = (*REASONS, UNKNOWN)
REASON_TEXT = {
    NO_ARTIFACT: "no artifact for this shape in the served dir",
    FINGERPRINT: "its entry's artifacts are in place, but the runtime's key did not take them",
    FALLBACK: "the precompiled function did not serve the call, its torch.compile fallback did",
    RECOMPILE: "a guard failed, so Dynamo traced again and the new graph was not in the cache",
    AUTOTUNE: "an autotune benchmark ran",
    NOT_HYDRATED: "its entry is not hydrated yet (hot first placed the hottest entries so far)",
    UNKNOWN: "the serving process did not say why",
}
SOURCES = ("runtime", "files")   # the runtime's own counters, or (without them) new files in the served dir
GRAPHS = Bound("graphs", 0, 10**9, integer=True)
COMPILE_KEY = "compile"


@dataclass(frozen=True)
class CompileInfo:
    """What one call compiled and why: `graphs` (graphs or kernels the runtime compiled; 0 when strict mode
    refused before the compile ran), `seconds`, `source` (how it was seen), `backend`."""

    reason: str
    graphs: int
    seconds: float
    source: str
    backend: str

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "graphs": self.graphs, "seconds": round(self.seconds, 6),
                "source": self.source, "backend": self.backend}

    @classmethod
    def parse(cls, doc: object) -> CompileInfo:
        if not isinstance(doc, Mapping):
            raise Refused(f"{COMPILE_KEY} is not a JSON object")
        reason, source = doc.get("reason"), doc.get("source")
        if reason not in REASONS:
            raise Refused(f"{COMPILE_KEY}.reason {show(reason)} is not one of {', '.join(REASONS)}")
        if source not in SOURCES:
            raise Refused(f"{COMPILE_KEY}.source {show(source)} is not one of {', '.join(SOURCES)}")
        return cls(str(reason), int(number(doc, "graphs", GRAPHS)), float(number(doc, "seconds", SECONDS)),
                   str(source), name(doc, "backend"))


@dataclass(frozen=True)
class ServedCall(CallRecord):
    """A spool record with the ledger's word on it (None: it did not compile, or its writer said nothing)."""

    compile: CompileInfo | None = None


def parse_line(line: bytes) -> CallRecord:
    """One spool line: the CallRecord (every field checked, format/spool.py), and its `compile` object when
    there is one (checked as well). Only a line that names the key is read twice."""
    record = CallRecord.parse(line)
    if f'"{COMPILE_KEY}"'.encode() not in line:
        return record
    doc = loads(line)
    if doc.get(COMPILE_KEY) is None:
        return record
    return ServedCall(**record.__dict__, compile=CompileInfo.parse(doc[COMPILE_KEY]))


def compile_of(record: CallRecord) -> CompileInfo | None:
    return record.compile if isinstance(record, ServedCall) else None


def reason_counts(records: list[CallRecord], plain_wall: float) -> tuple[tuple[str, int, float], ...]:
    """(reason, compiled calls, compile seconds) of one report row's records, by reason: a call's seconds are its
    wall time above the row's plain call (`plain_wall`), as the row's own compile_s (reports/miss.py)."""
    out: dict[str, list[float]] = {}
    for r in records:
        if not r.compiled:
            continue
        info = compile_of(r)
        slot = out.setdefault(info.reason if info is not None else UNKNOWN, [0, 0.0])
        slot[0] += 1
        slot[1] += max(0.0, r.wall_s - plain_wall)
    return tuple((reason, int(n), round(s, 3)) for reason, (n, s) in sorted(out.items()))


def reasons_to_json(reasons: tuple[tuple[str, int, float], ...]) -> dict[str, dict[str, float]]:
    return {reason: {"calls": n, "compile_s": s} for reason, n, s in reasons}


def reasons_of(doc: Mapping[str, Any], compiled: int) -> tuple[tuple[str, int, float], ...]:
    """A report row's optional `reasons` (absent in reports written before it): each reason known, each count
    and time in bounds, the calls at most the row's compiled calls."""
    raw = doc.get("reasons")
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or len(raw) > len(LABELS):
        raise Refused("reasons is not an object of reasons")
    out = []
    for reason, figures in sorted(raw.items()):
        if reason not in LABELS or not isinstance(figures, Mapping):
            raise Refused(f"reasons: {show(reason)} is not one of {', '.join(LABELS)}")
        out.append((str(reason), int(number(figures, "calls", CALLS)), float(number(figures, "compile_s", SECONDS))))
    if sum(n for _, n, _ in out) > compiled:
        raise Refused(f"reasons count more calls than the row's {compiled} compiled")
    return tuple(out)


__all__ = ["LABELS", "REASONS", "REASON_TEXT", "SOURCES", "UNKNOWN", "CompileInfo", "ServedCall", "compile_of",
           "parse_line", "reason_counts", "reasons_of", "reasons_to_json"]

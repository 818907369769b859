"""`cachekeeper diff A B`: which fields separate two toolchains, which entries one has and the other
lacks, and what rebuilding them costs (recorded build times, scheduled over N workers)."""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..catalog.rows import EntryCost
from ..errors import UnknownId, UsageError
from ..format.fingerprint import Fingerprint

ID_PREFIX = re.compile(r"[0-9a-f]{1,16}")


@dataclass(frozen=True)
class RebuildCost:
    entries: int
    size: int
    seconds: float          # sum of the recorded build times: one worker's wall time
    unknown: int            # entries without a recorded build time (not in the sums)
    workers: int
    wall_seconds: float     # longest-first schedule over `workers` parallel builders

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FingerprintDiff:
    a: Fingerprint
    b: Fingerprint
    a_id: str               # the catalog's ids (equal to .id; kept for what-ifs that exist nowhere)
    b_id: str
    fields: dict[str, tuple[str, str]]         # name -> (a, b)
    only_a: tuple[EntryCost, ...]              # built for A, not for B: B must rebuild them
    only_b: tuple[EntryCost, ...]
    rebuild_for_b: RebuildCost
    rebuild_for_a: RebuildCost

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": {"id": self.a_id, "backend": self.a.backend, "fields": dict(self.a.fields)},
            "b": {"id": self.b_id, "backend": self.b.backend, "fields": dict(self.b.fields)},
            "fields": {k: {"a": va, "b": vb} for k, (va, vb) in self.fields.items()},
            "only_a": [e.to_dict() for e in self.only_a],
            "only_b": [e.to_dict() for e in self.only_b],
            "rebuild_for_b": self.rebuild_for_b.to_dict(),
            "rebuild_for_a": self.rebuild_for_a.to_dict(),
        }


def makespan(durations: Iterable[float], workers: int) -> float:
    """Wall time of longest-first list scheduling on `workers` identical builders (within 4/3 of optimal)."""
    if workers < 1:
        raise UsageError(f"the number of workers must be at least 1, got {workers}")
    loads = [0.0] * workers
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(loads, loads[0] + d)
    return max(loads)


def rebuild_cost(entries: Sequence[EntryCost], workers: int) -> RebuildCost:
    known = [e.seconds for e in entries if e.seconds is not None]
    return RebuildCost(entries=len(entries), size=sum(e.size for e in entries), seconds=round(sum(known), 3),
                       unknown=len(entries) - len(known), workers=workers,
                       wall_seconds=round(makespan(known, workers), 3))


def plan_diff(a: Fingerprint, b: Fingerprint, only_a: Sequence[EntryCost], only_b: Sequence[EntryCost], *,
              workers: int = 1, a_id: str | None = None, b_id: str | None = None) -> FingerprintDiff:
    return FingerprintDiff(a=a, b=b, a_id=a_id or a.id, b_id=b_id or b.id, fields=a.diff(b),
                           only_a=tuple(only_a), only_b=tuple(only_b),
                           rebuild_for_b=rebuild_cost(only_a, workers), rebuild_for_a=rebuild_cost(only_b, workers))


def with_overrides(fp: Fingerprint, pairs: Sequence[str]) -> Fingerprint:
    """A what-if toolchain: this host's fingerprint with some fields set (`torch=2.14.0`).

    A field the backend does not have is an error: a typo would otherwise yield a toolchain that never
    existed and a diff that says everything must be rebuilt."""
    fields = dict(fp.fields)
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"a field override is FIELD=VALUE, got {pair!r}", "for example torch=2.14.0")
        if name not in fields:
            raise UsageError(f"the {fp.backend} fingerprint has no field {name!r}",
                             f"fields: {', '.join(sorted(fields))}")
        fields[name] = value
    return Fingerprint.of(fp.backend, fields)


def resolve_prefix(prefix: str, ids: Iterable[str], what: str = "fingerprint") -> str:
    """The one id starting with `prefix`; none or several is a one-line error naming them."""
    prefix = prefix.strip().lower()
    if not ID_PREFIX.fullmatch(prefix):
        raise UnknownId(f"{prefix!r} is not a {what} id (1 to 16 hex digits)")
    ids = sorted(set(ids))
    if prefix in ids:
        return prefix
    matches = [i for i in ids if i.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UnknownId(f"no {what} {prefix!r} in the catalog")
    shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
    raise UsageError(f"{what} prefix {prefix!r} matches {len(matches)}: {shown}", "give more characters of the id")


def render_text(d: FingerprintDiff, *, limit: int | None = 50) -> list[str]:
    """Human report: differing fields, entries each side lacks (with sizes), the rebuild cost."""
    out = [f"A {d.a_id} ({d.a.backend})  vs  B {d.b_id} ({d.b.backend})"]
    if d.fields:
        width = max(len(k) for k in d.fields)
        out.append(f"{len(d.fields)} fields differ:")
        out += [f"  {k:<{width}}  {va}  ->  {vb}" for k, (va, vb) in d.fields.items()]
    else:
        out.append("no field differs")
    for title, entries, cost in (("built for A, not for B", d.only_a, d.rebuild_for_b),
                                 ("built for B, not for A", d.only_b, d.rebuild_for_a)):
        out.append(f"{cost.entries} entries {title} ({cost.size / 1e6:.1f} MB):")
        shown = entries if limit is None else entries[:limit]
        out += [f"  {e.key[:12]}  {e.label}  {e.size / 1e6:8.1f} MB  {_secs(e.seconds)}" for e in shown]
        if len(shown) < len(entries):
            out.append(f"  ... {len(entries) - len(shown)} more (--all or --json lists every one)")
    c = d.rebuild_for_b
    unknown = f"; {c.unknown} without a recorded build time" if c.unknown else ""
    out.append(f"rebuild cost A -> B: {c.entries} entries, {_hms(c.seconds)} of recorded build time, "
               f"{_hms(c.wall_seconds)} on {c.workers} worker{'s' if c.workers != 1 else ''}{unknown}")
    return out


def _secs(s: float | None) -> str:
    return "build time unrecorded" if s is None else f"{s:.1f}s build"


def _hms(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"

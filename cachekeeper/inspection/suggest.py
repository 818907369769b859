"""Traffic-driven matrix: which shapes serving hosts met that no prebuild covers, ranked by their cost.

Pure: it takes decoded reports (reports.py) and a predicate saying what is prebuilt (a config's
declared shapes for `suggest`, the store's entries for `stats`), and returns ranked suggestions. A
shape compiled on many hosts for many minutes ranks first: that is where a prebuild saves the most.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..format.spec import Shape
from ..reports.miss import Report

# (fingerprint id, model, shape) -> is it prebuilt?
Prebuilt = Callable[[str, str, Shape], bool]


@dataclass
class Suggestion:
    fingerprint_id: str
    backend: str
    model: str
    shape: Shape
    calls: int = 0
    compiled: int = 0
    compile_s: float = 0.0
    hosts: set[str] = field(default_factory=set)       # hosts that compiled it

    def line(self) -> str:
        """"add 768x1360x1 to model flux: 1,204 calls, 37 hosts compiled it, 41 min of compile"."""
        hosts = len(self.hosts)
        return (f"add {self.shape.label()} to model {self.model}: {self.calls:,} call{'' if self.calls == 1 else 's'}, "
                f"{hosts:,} host{'' if hosts == 1 else 's'} compiled it, {_duration(self.compile_s)} of compile")

    def to_dict(self) -> dict[str, object]:
        return {"fingerprint_id": self.fingerprint_id, "backend": self.backend, "model": self.model,
                "shape": self.shape.label(), "calls": self.calls, "compiled_calls": self.compiled,
                "hosts_compiled": len(self.hosts), "compile_s": round(self.compile_s, 3)}


def _duration(seconds: float) -> str:
    if seconds >= 60:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds:.1f} s"


def served_not_prebuilt(reports: Iterable[Report], prebuilt: Prebuilt) -> list[Suggestion]:
    """Every (toolchain, model, shape) served but not prebuilt, most costly first: hosts that compiled
    it, then compile time, then calls (ties by name, so the order is stable)."""
    found: dict[tuple[str, str, Shape], Suggestion] = {}
    for report in reports:
        for row in report.rows:
            shape = Shape(row.height, row.width, row.batch)
            if prebuilt(report.fingerprint_id, row.model, shape):
                continue
            s = found.setdefault((report.fingerprint_id, row.model, shape),
                                 Suggestion(report.fingerprint_id, report.backend, row.model, shape))
            s.calls += row.calls
            s.compiled += row.compiled
            s.compile_s += row.compile_s
            if row.compiled:
                s.hosts.add(report.host)
    return sorted(found.values(), key=lambda s: (-len(s.hosts), -s.compile_s, -s.calls, s.fingerprint_id,
                                                  s.model, s.shape))


def refused(suggestions: Iterable[Suggestion], problem: Callable[[Shape], str | None]) \
        -> tuple[list[Suggestion], list[str]]:
    """(the suggestions a config would take, one line per shape it would refuse and why): a serving host
    reports what it was asked, and a shape no config can hold is nothing to suggest."""
    kept: list[Suggestion] = []
    lines: dict[str, None] = {}   # one line a shape, whichever toolchains served it
    for s in suggestions:
        why = problem(s.shape)
        if why is None:
            kept.append(s)
        else:
            lines[f"reports name shape {s.shape.label()} of model {s.model}, which a config refuses ({why}); "
                  "skipped"] = None
    return kept, list(lines)


__all__ = ["Prebuilt", "Suggestion", "refused", "served_not_prebuilt"]

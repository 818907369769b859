"""The compile ledger of one serving process: every call that compiled (or, under strict `fail`, would have),
with the backend, the shape and arguments that keyed it, the graphs and seconds, the reason and the entry
that would have served it.

    from cachekeeper.runtime import compile_ledger
    atexit.register(lambda: log.info("%s", compile_ledger().to_json()))   # one JSON summary at shutdown

Calls through `watch(pipe)` are one entry each, with their shape (`96x64x1`); a compile outside any watched
call (a plain `torch.compile`, seen by strict mode's hooks) is one entry per graph, with the graph's inputs in
place of a shape. The same records reach the spool (the `compile` object of a spool line, reports/compiles.py),
hence miss reports and the report sidecar's `reason` label. Memory is bounded: the newest MAX_RECENT entries
are kept, the rest only in the totals (one row per backend, model, shape and reason).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..reports.compiles import CompileInfo

KIND = "cachekeeper.compile-ledger"
VERSION = 1
MAX_RECENT = 200
MAX_ROWS = 500   # totals rows kept; later distinct rows are summed under model "other"


@dataclass(frozen=True)
class Entry:
    backend: str
    model: str
    shape: str | None               # the project's notation (`96x64x1`); None outside a watched call
    arguments: Mapping[str, Any]    # the call's graph arguments, or the graph's inputs
    graphs: int                     # graphs or kernels the runtime compiled (0: refused before it ran)
    seconds: float
    reason: str
    source: str                     # runtime | files
    key: str | None                 # the entry that would have served the call
    new_files: int = 0
    ran: bool = True                # False: strict `fail` stopped it before the compile
    refused: bool = False           # strict `fail` raised for it
    time: float = field(default_factory=time.time)

    def info(self) -> CompileInfo:
        return CompileInfo(self.reason, self.graphs, self.seconds, self.source, self.backend)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.model, "shape": self.shape, "arguments": dict(self.arguments),
                "graphs": self.graphs, "seconds": round(self.seconds, 3), "reason": self.reason,
                "source": self.source, "key": self.key, "new_files": self.new_files, "ran": self.ran,
                "refused": self.refused, "time": round(self.time, 3)}


class Ledger:
    """Thread-safe; one per process (`compile_ledger()`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.recent: deque[Entry] = deque(maxlen=MAX_RECENT)
        self.totals: dict[tuple[str, str, str, str], list[Any]] = {}   # -> [calls, graphs, seconds, key, refused]
        self.started = time.time()

    def add(self, entry: Entry) -> None:
        row = (entry.backend, entry.model, entry.shape or "", entry.reason)
        with self._lock:
            self.recent.append(entry)
            if row not in self.totals and len(self.totals) >= MAX_ROWS:
                row = (entry.backend, "other", "", entry.reason)
            total = self.totals.setdefault(row, [0, 0, 0.0, entry.key, 0])
            total[0] += 1
            total[1] += entry.graphs
            total[2] += entry.seconds
            total[4] += int(entry.refused)

    def entries(self) -> list[Entry]:
        with self._lock:
            return list(self.recent)

    def summary(self) -> dict[str, Any]:
        """What this process compiled since it started, as one JSON-ready object."""
        from . import probe, strict_mode

        with self._lock:
            rows = [{"backend": b, "model": m, "shape": s or None, "reason": r, "calls": t[0], "graphs": t[1],
                     "seconds": round(t[2], 3), "key": t[3], "refused": t[4]}
                    for (b, m, s, r), t in sorted(self.totals.items())]
            recent = [e.to_dict() for e in self.recent]
        by_reason: dict[str, int] = {}
        for row in rows:
            by_reason[row["reason"]] = by_reason.get(row["reason"], 0) + row["calls"]
        return {"v": VERSION, "kind": KIND, "host": socket.gethostname(), "pid": os.getpid(),
                "started": round(self.started, 3), "time": round(time.time(), 3), "strict": strict_mode.mode(),
                "compiled_calls": sum(r["calls"] for r in rows), "graphs": sum(r["graphs"] for r in rows),
                "seconds": round(sum(r["seconds"] for r in rows), 3), "by_reason": by_reason, "rows": rows,
                "recent": recent[-20:], "notes": probe.notes()}

    def to_json(self) -> str:
        return json.dumps(self.summary(), sort_keys=True)

    def clear(self) -> None:
        with self._lock:
            self.recent.clear()
            self.totals.clear()


_LEDGER = Ledger()


def compile_ledger() -> Ledger:
    """This process's compile ledger."""
    return _LEDGER


__all__ = ["KIND", "Entry", "Ledger", "compile_ledger"]

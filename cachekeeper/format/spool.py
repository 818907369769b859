"""The miss-report spool: one JSON line per pipeline call, written by the serving process
(`cachekeeper.runtime.watch`) and read by `cachekeeper report`, which may be another release (a sidecar):
records carry their version `v`, and a reader skips versions it does not know."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RECORD_VERSION = 1
SPOOL_SUFFIX = ".jsonl"


@dataclass(frozen=True)
class CallRecord:
    """One pipeline call: its graph-changing arguments, whether it compiled, how long it took."""

    model: str
    height: int | None
    width: int | None
    batch: int                       # prompts x images per prompt: the batch the graph was compiled for
    guidance: float | None
    max_sequence_length: int | None
    compiled: bool
    new_files: int
    wall_s: float
    time: float                      # unix seconds at the call's end
    v: int = RECORD_VERSION

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CallRecord:
        return cls(model=str(d["model"]), height=_int_or_none(d.get("height")), width=_int_or_none(d.get("width")),
                   batch=int(d["batch"]), guidance=None if d.get("guidance") is None else float(d["guidance"]),
                   max_sequence_length=_int_or_none(d.get("max_sequence_length")), compiled=bool(d["compiled"]),
                   new_files=int(d["new_files"]), wall_s=float(d["wall_s"]), time=float(d["time"]),
                   v=int(d.get("v", 0)))


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]

"""The miss-report spool: one JSON line per pipeline call, written by the serving process
(`cachekeeper.runtime.watch`) and read by `cachekeeper report`, which may be another release (a sidecar):
records carry their version `v`, and a reader skips versions it does not know.

A serving host is the least-trusted writer there is, so every field is checked where it is read
(`CallRecord.parse`): its JSON type, finiteness and range (`bounds.py`: a height is a SIZE, a time fits a
calendar), and the record's size. The checks are shared with the miss reports built from these records
(reports/miss.py): `number`, `optional`, `name` and `loads` say why a value is refused, in one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..bounds import DAY, SIZE, Bound

RECORD_VERSION = 1
SPOOL_SUFFIX = ".jsonl"
MAX_RECORD_BYTES = 4096            # a record is ~250 bytes; a model name is at most 100 characters
MAX_SPOOL_BYTES = 16 << 20         # per spool file: the writer never goes past it (a stopped reporter must not
                                   # fill the disk), and a reader refuses a file that does
# The config's model-name rule (config/schema.py _NAME_RE, tested equal): a name that could be in no config
# is never a shape to suggest, and a name with control characters must never reach a terminal.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

# The bounds of what a serving host reports. Far above any real call, far below what breaks a sum or a date.
CALL_TIME = Bound("time", 0, 4_102_444_800, unit="unix seconds")      # up to 2100-01-01
WALL = Bound("wall_s", 0, DAY, unit="seconds")                      # one call
SECONDS = Bound("seconds", 0, 1e12, unit="seconds")                    # a report row's calls, summed
CALLS = Bound("count", 0, 10**12, integer=True)                         # calls, compiled calls, dropped
GUIDANCE = Bound("guidance", -1000, 1000)
SEQUENCE = Bound("max_sequence_length", 1, 1_000_000, integer=True)


class Refused(ValueError):
    """Why an untrusted value is refused: one line, naming the field."""


def show(value: object, limit: int = 40) -> str:
    """`value` for a one-line message: escaped, and cut at `limit` characters."""
    text = ascii(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def number(doc: Mapping[str, Any], key: str, bound: Bound) -> int | float:
    """doc[key] as a JSON number within `bound` (a whole number where the bound says so); Refused otherwise."""
    if key not in doc:
        raise Refused(f"{key} is missing")
    raw = doc[key]
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise Refused(f"{key} {show(raw)} is not {'a whole number' if bound.integer else 'a number'}")
    if isinstance(raw, int) and abs(raw) >= 2 ** 63:   # past any bound, and past what a float converts
        raise Refused(f"{key} {show(raw)} is past the bound of {bound.high:g}")
    try:
        return bound.parse(raw)
    except ValueError as exc:
        raise Refused(f"{key}: {exc}") from None


def optional(doc: Mapping[str, Any], key: str, bound: Bound) -> int | float | None:
    """As `number`, where null (or no key) means "not given"."""
    return None if doc.get(key) is None else number(doc, key, bound)


def name(doc: Mapping[str, Any], key: str, pattern: re.Pattern[str] = MODEL_NAME) -> str:
    raw = doc.get(key)
    if not isinstance(raw, str) or not pattern.fullmatch(raw):
        raise Refused(f"{key} {show(raw)} is not a name (letters, digits, '.', '_', '-', at most 100)")
    return raw


def _constant(text: str) -> Any:
    raise Refused(f"{text} is not a JSON number")


def loads(data: bytes | str) -> Any:
    """Strict JSON: no NaN/Infinity literals; any malformed input, however deep, is Refused."""
    try:
        return json.loads(data, parse_constant=_constant)
    except Refused:
        raise
    except (ValueError, RecursionError) as exc:   # UnicodeDecodeError and over-long integers are ValueErrors
        reason = "nested too deep" if isinstance(exc, RecursionError) else "not JSON"
        raise Refused(reason) from None


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
    def parse(cls, line: bytes) -> CallRecord:
        """One spool line, every field checked; Refused(why) for anything this version cannot use."""
        if len(line) > MAX_RECORD_BYTES:
            raise Refused(f"{len(line)} bytes, over the {MAX_RECORD_BYTES}-byte bound")
        d = loads(line)
        if not isinstance(d, dict):
            raise Refused("not a JSON object")
        if type(d.get("v")) is not int or d["v"] != RECORD_VERSION:
            raise Refused(f"record version {show(d.get('v'))} (this cachekeeper reads {RECORD_VERSION})")
        return cls.from_dict(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CallRecord:
        compiled = d.get("compiled")
        if not isinstance(compiled, bool):
            raise Refused(f"compiled {show(compiled)} is not true or false")
        return cls(model=name(d, "model"), height=_size(d, "height"), width=_size(d, "width"),
                   batch=int(number(d, "batch", SIZE)), guidance=_float(optional(d, "guidance", GUIDANCE)),
                   max_sequence_length=_int(optional(d, "max_sequence_length", SEQUENCE)), compiled=compiled,
                   new_files=int(number(d, "new_files", CALLS)), wall_s=float(number(d, "wall_s", WALL)),
                   time=float(number(d, "time", CALL_TIME)), v=RECORD_VERSION)


def _size(d: Mapping[str, Any], key: str) -> int | None:
    """A height or width: absent when the call gave none (and the pipeline has no default)."""
    return _int(optional(d, key, SIZE))


def _int(value: int | float | None) -> int | None:
    return None if value is None else int(value)


def _float(value: int | float | None) -> float | None:
    return None if value is None else float(value)

"""Every number cachekeeper accepts, checked where it enters: one bound per quantity, shared by the CLI's
click options (cli/options.py), env vars, the config schema and the Python API.

A value outside its bound is one error naming where it came from (`--threads`, `env
CACHEKEEPER_STALL_TIMEOUT`, `ck.yaml:7`, `cachekeeper.hydrate(threads=...)`) and the range it must be in.
Zero where zero means nothing, negatives, nan, inf and values past a sane ceiling are refused: a hydrate
with 0 threads would hang the boot, 1e20 workers would exhaust memory, an infinite deadline overflows the
timers. Pure: no I/O, stdlib only.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from .errors import CachekeeperError, UsageError

DAY = 86400.0


@dataclass(frozen=True)
class Bound:
    """`low < value` (`low_open`) or `low <= value`, and `value <= high`; integers only if `integer`."""

    what: str
    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    unit: str = ""

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        low = f"> {self.low:g}" if self.low_open else f">= {self.low:g}"
        unit = f" {self.unit}" if self.unit else ""
        return f"{kind} {low} and <= {self.high:g}{unit}"

    def parse(self, raw: object) -> int | float:
        """The value as a number within the bound; ValueError(why) otherwise."""
        value = _number(raw, self.integer)
        if math.isnan(value):
            raise ValueError("nan is not a number")
        if math.isinf(value):
            raise ValueError(f"{value} is not finite")
        if value < self.low or (self.low_open and value == self.low):
            raise ValueError(f"{value:g} is too small")
        if value > self.high:
            raise ValueError(f"{value:g} is past the bound of {self.high:g}")
        return int(value) if self.integer else float(value)


def _number(raw: object, integer: bool) -> float:
    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not a number")
    if isinstance(raw, int):
        return raw if not integer or abs(raw) < 2 ** 63 else math.inf
    if isinstance(raw, float):
        if integer and math.isfinite(raw) and not raw.is_integer():
            raise ValueError(f"{raw!r} is not a whole number")
        return raw
    if isinstance(raw, str):
        text = raw.strip()
        try:
            return int(text) if integer else float(text)
        except ValueError:
            kind = "a whole number" if integer else "a number"
            raise ValueError(f"{raw!r} is not {kind}") from None
    raise ValueError(f"{raw!r} is not a number")


def cpus() -> int:
    return os.cpu_count() or 1


# The bounds. Ceilings are far above any real use and far below what breaks a timer or a thread pool.
THREADS = Bound("threads", 1, 256, integer=True)
WORKERS = Bound("workers", 1, 1024, integer=True)            # a host's builds; prebuild also caps at devices/CPUs
PLAN_WORKERS = Bound("workers", 1, 100_000, integer=True)   # diff's what-if: builders of a fleet, not this host
DEADLINE = Bound("deadline", 0, 7 * DAY, low_open=True, unit="seconds")
LEASE = Bound("lease", 0, DAY, low_open=True, unit="seconds")
HEARTBEAT = Bound("heartbeat", 0, DAY, low_open=True, unit="seconds")
MIN_AGE = Bound("min-age", 0, 3650 * DAY, unit="seconds")
SETTLE = Bound("settle", 0, 3600, unit="seconds")
WATCH = Bound("watch", 0, DAY, low_open=True, unit="seconds")
LOCK_TIMEOUT = Bound("lock-timeout", 0, DAY, unit="seconds")
NICE = Bound("nice", 0, 19, integer=True)
STALL_TIMEOUT = Bound("stall timeout", 0, 3600, low_open=True, unit="seconds")
BUILD_TIMEOUT = Bound("timeout", 0, 7 * DAY, low_open=True, unit="seconds")
PORT = Bound("port", 0, 65535, integer=True)
PART_MIB = Bound("part size", 0, 4096, unit="MiB")          # hydrate's ranged-GET part; 0 turns parts off
SIZE = Bound("size", 1, 65536, integer=True)                 # a shape's height, width or batch
BYTE_BUDGET = Bound("byte budget", 1, 1 << 60, integer=True, unit="bytes")  # a dest or node cache: above is a typo
COUNT = Bound("count", 1, 1_000_000, integer=True)          # entries (--ready-after): more than any matrix
COMPILE_THREADS = Bound("compile threads", 1, 1024, integer=True)   # a server's Inductor compile workers


# --- byte sizes: one parser for flags, env vars, the config and the Python API ---------------------------

_BYTE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_BYTES_RE = re.compile(r"(\d+)\s*([kmgtp]?)(?:i?b)?", re.IGNORECASE)
_FRACTION_RE = re.compile(r"(\d*\.\d+|\d+\.\d*)\s*([kmgtp]?)(?:i?b)?", re.IGNORECASE)


def parse_bytes(raw: object, bound: Bound = BYTE_BUDGET) -> int:
    """`20000000000`, `20G`, `512MiB`, `1t` (binary units, a trailing `B`/`iB` optional): a whole number of
    bytes within `bound`; ValueError(why) otherwise. Fractions (`1.5`, `0.5G`) are refused, never
    truncated: `--max-bytes 1.5` meant something, and 1 byte is not it."""
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ValueError(f"{raw!r} is not a byte size")
    if isinstance(raw, int):
        value = raw
    else:
        text = raw.strip()
        m = _BYTES_RE.fullmatch(text)
        if m is None:
            fraction = _FRACTION_RE.fullmatch(text) is not None
            raise ValueError(f"{raw!r} is {'a fraction: bytes are whole' if fraction else 'not a byte size'}")
        value = int(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]
    if value < bound.low:
        raise ValueError(f"{raw!r} is too small")
    if value > bound.high:
        raise ValueError(f"{raw!r} is past the bound of 2**60 bytes")
    return value


def checked_bytes(raw: object, source: str, error: type[CachekeeperError] = UsageError) -> int:
    """A byte budget from `source` (a flag, `env VAR`, `file:line`, an API argument), or one `error`."""
    try:
        return parse_bytes(raw)
    except ValueError as exc:
        raise error(bytes_problem(source, raw, exc), f"give {source} {BYTES_DESCRIBED}") from None


def bytes_problem(source: str, raw: object, exc: ValueError) -> str:
    """The one message every entry point gives a bad byte size (a fraction says so)."""
    why = " (a fraction: bytes are whole)" if "fraction" in str(exc) else ""
    return f"{source} must be a byte count from 1 to 2**60 (e.g. 20G), got {raw!r}{why}"


BYTES_DESCRIBED = "a whole number of bytes, optionally with a K, M, G, T or P suffix (binary units)"


# --- env vars read outside click: checked when any command starts, even one that ends up a no-op ----

def check_environment(environ: dict[str, str] | None = None) -> None:
    """Every env var cachekeeper reads outside its flags, checked at entry: the registry's
    (settings.CHECKED_AT_ENTRY) say which and with what bound."""
    from .settings import check_environment as check_registry

    check_registry(environ)


def checked(raw: object, bound: Bound, source: str, error: type[CachekeeperError] = UsageError) -> int | float:
    """`raw` within `bound`, or one `error` naming `source` (a flag, `env VAR`, `file:line`, an API argument)."""
    try:
        return bound.parse(raw)
    except ValueError as exc:
        raise error(f"{source}: {exc}", f"give {source} {bound.describe()}") from None


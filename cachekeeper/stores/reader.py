"""Bounded, resumable reads: the read side every store shares.

One `Deadline` bounds a whole hydrate; each request's timeout is derived from what is left of it. A
reset, a stall or a short body is retried with backoff and full jitter, resuming from the last byte
received (a ranged request), never past the deadline. Reads stop at the declared size: an object
larger than its manifest says is never read beyond it, and one whose total size disagrees is refused
before its body is read.

A store provides one primitive, `Store.open_range` (a single attempt, no retries of its own), which returns
a `Body` (stores/base.py: the contract imports nothing of this module).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import HydrateIncomplete, IntegrityError, StoreError, StoreRetryable
from .base import Store

T = TypeVar("T")
READ_CHUNK = 1 << 20   # bytes a reader holds at once: the unit of "bytes in flight"


class Counter:
    """Retries across threads, for the summary line."""

    def __init__(self) -> None:
        self.retries = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.retries += 1


# Without a deadline, a store that sends no byte to any waiting read for this many stall timeouts is
# declared stalled for the rest of the run (docs/cli.md and docs/durability.md state the bound).
IDLE_STALLS = 3


class Deadline:
    """A wall-clock budget (monotonic), or none at all (`seconds=None`), plus a stall watchdog.

    The watchdog bounds a run without a deadline: while any read waits on the store, a byte must arrive
    within `idle` seconds (IDLE_STALLS stall timeouts); once none has, the store is declared stalled and
    every read of this run fails at once (a sticky verdict, so N objects never cost N windows). A run with
    a deadline has chosen its own bound: the watchdog is off (`idle` None) unless asked for."""

    def __init__(self, seconds: float | None = None, idle: float | None = None) -> None:
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds
        self.cancelled = threading.Event()   # set when the caller has given up on the workers
        self.retries = Counter()             # attempts retried under this budget, for the summary
        self.idle = idle if idle is not None or seconds is not None else IDLE_STALLS * default_policy().stall
        self._watch = threading.Lock()
        self._waiting = 0                    # reads in flight (a read's retries included)
        self._last = time.monotonic()        # the last byte, or when a read began with none in flight
        self.stalled = ""                    # why the store was declared stalled; "" while it is not

    # --- the stall watchdog ------------------------------------------------------------------------

    def begin_read(self) -> None:
        with self._watch:
            if self._waiting == 0:
                self._last = time.monotonic()   # nothing was waiting: no silence to count before now
            self._waiting += 1

    def end_read(self) -> None:
        with self._watch:
            self._waiting -= 1

    def progress(self) -> None:
        """A byte (or a response) came from the store."""
        self._last = time.monotonic()

    def idle_left(self) -> float:
        return math.inf if self.idle is None else self.idle - (time.monotonic() - self._last)

    def check_idle(self, where: str) -> None:
        """Raise once the store has sent nothing for `idle` seconds to reads that wait on it."""
        if not self.stalled and self.idle is not None and self.idle_left() <= 0:
            self.stalled = (f"the store sent nothing for {self.idle:g}s ({IDLE_STALLS} stall timeouts of "
                            f"{self.idle / IDLE_STALLS:g}s, CACHEKEEPER_STALL_TIMEOUT; no --deadline)")
        if self.stalled:
            from ..errors import StoreUnreachable

            raise StoreUnreachable(f"{where}: {self.stalled}")

    def left(self) -> float | None:
        return None if self.at is None else self.at - time.monotonic()

    def timeout(self, cap: float) -> float:
        """A per-request timeout: `cap`, or what is left if that is less (never zero: sockets read 0 as
        non-blocking)."""
        left = self.left()
        return cap if left is None else max(0.05, min(cap, left))

    def check(self, what: str) -> None:
        if self.cancelled.is_set():
            raise HydrateIncomplete(f"stopped {what}: the hydrate gave up (deadline)")
        left = self.left()
        if left is not None and left <= 0:
            raise HydrateIncomplete(f"the deadline of {self.seconds:g}s ran out while {what}")

    def run(self, fn: Callable[[], T], what: str) -> T:
        """Call `fn`, but return control when the deadline runs out even if `fn` is stuck inside an SDK
        call whose own timeouts we do not control (listing through botocore). The abandoned thread is a
        daemon: it cannot hold the process open."""
        if self.at is None:
            return fn()
        box: dict[str, object] = {}

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # handed to the caller's thread below
                box["error"] = exc

        t = threading.Thread(target=target, name="ck-deadline", daemon=True)
        t.start()
        t.join(max(0.0, self.left() or 0.0))
        if t.is_alive():
            self.cancelled.set()
            raise HydrateIncomplete(f"the deadline of {self.seconds:g}s ran out while {what}")
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return box["value"]  # type: ignore[return-value]


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8          # per object; the deadline usually ends things sooner
    stall: float = 15.0        # seconds without a byte before an attempt is abandoned
    connect: float = 3.0
    base: float = 0.1          # backoff: base * 2^n, capped, with full jitter
    cap: float = 2.0

    def delay(self, attempt: int) -> float:
        import random  # only when retrying: not on the boot path's imports

        return random.uniform(0, min(self.cap, self.base * (2 ** attempt)))


def sdk_timeouts() -> tuple[float, float, int]:
    """(connect, read, attempts) for what a store's SDK sends itself (listings, HEADs, small writes): the
    read timeout is the stall timeout, and attempts are few, so a stalled store ends an SDK call within
    IDLE_STALLS stall timeouts (plus connect timeouts and a second of backoff), as `read_into` does."""
    policy = default_policy()
    return policy.connect, policy.stall, IDLE_STALLS


def default_policy() -> RetryPolicy:
    """`CACHEKEEPER_STALL_TIMEOUT` (seconds without a byte before an attempt is abandoned) tunes the
    one knob a fleet may want to; the deadline caps it anyway."""
    from .. import settings

    stall = settings.STALL_TIMEOUT.get()   # a typo is an error, never ignored
    return RetryPolicy(stall=RetryPolicy.stall if stall is None else float(stall))


def parse_content_range(value: str | None) -> int | None:
    """The total of `bytes a-b/total` (None if absent or `*`)."""
    if not value or "/" not in value:
        return None
    total = value.rsplit("/", 1)[1].strip()
    return int(total) if total.isdigit() else None


def read_into(store: Store, key: str, sink: Callable[[bytes], None], *, start: int = 0,
              length: int | None = None, total: int | None = None, limit: int | None = None,
              deadline: Deadline | None = None, policy: RetryPolicy | None = None,
              counter: Counter | None = None) -> int:
    """Stream bytes [start, start+length) of `key` into `sink` (the whole object when length is None),
    resuming after failures from the last byte received. `total`: the object's size as declared (refused
    before reading if the store says otherwise); `limit`: the most bytes an unsized read may return."""
    policy = policy or default_policy()
    deadline = deadline or Deadline(idle=IDLE_STALLS * policy.stall)
    deadline.begin_read()
    try:
        return _read_into(store, key, sink, start, length, total, limit, deadline, policy, counter)
    finally:
        deadline.end_read()


def _read_into(store: Store, key: str, sink: Callable[[bytes], None], start: int, length: int | None,
               total: int | None, limit: int | None, deadline: Deadline, policy: RetryPolicy,
               counter: Counter | None) -> int:
    where = f"{store.url}/{key}"
    got = 0
    attempt = 0
    while True:
        deadline.check(f"reading {where}")
        deadline.check_idle(f"reading {where}")
        end = None if length is None else start + length
        try:
            stall = max(0.05, min(policy.stall, deadline.idle_left()))   # never past the watchdog
            body = store.open_range(key, start + got, end, deadline.timeout(stall),
                                    min(policy.connect, deadline.timeout(policy.connect)))
            deadline.progress()
            try:
                _check_total(where, body.total, total, limit)
                for chunk in body.chunks(READ_CHUNK):
                    if length is not None and got + len(chunk) > length:
                        chunk = chunk[:length - got]   # never past the declared size
                    if limit is not None and got + len(chunk) > limit:
                        raise IntegrityError(f"{where} is larger than {limit} bytes, the most allowed here")
                    sink(chunk)
                    got += len(chunk)
                    deadline.progress()
                    if length is not None and got >= length:
                        break
                    deadline.check(f"reading {where}")
            finally:
                body.close()
            if length is not None and got < length:
                if body.total is not None and start + got >= body.total:
                    raise IntegrityError(f"{where} is {body.total} bytes, shorter than its manifest declares")
                raise StoreRetryable(f"{where}: the body ended after {got} of {length} bytes")
            return got
        except StoreRetryable as exc:
            attempt += 1
            (counter or deadline.retries).add()
            if attempt >= policy.attempts:
                raise StoreError(f"{exc.message} (gave up after {attempt} attempts)", **exc.fields) from None
            pause = min(policy.delay(attempt), max(0.0, deadline.idle_left()))
            left = deadline.left()
            if left is not None and pause >= left:
                raise HydrateIncomplete(f"the deadline of {deadline.seconds:g}s ran out while retrying "
                                        f"{where} ({exc.message})", **exc.fields) from None
            time.sleep(pause)


def _check_total(where: str, said: int | None, declared: int | None, limit: int | None) -> None:
    if said is None:
        return
    if declared is not None and said != declared:
        raise IntegrityError(f"{where} is {said} bytes; its manifest declares {declared}")
    if limit is not None and said > limit:
        raise IntegrityError(f"{where} is {said} bytes, more than the {limit} allowed here")


def read_bytes(store: Store, key: str, *, limit: int, deadline: Deadline | None = None,
               policy: RetryPolicy | None = None, counter: Counter | None = None) -> bytes:
    """A small whole object (a manifest, a signature), bounded by `limit` bytes."""
    parts: list[bytes] = []
    read_into(store, key, parts.append, limit=limit, deadline=deadline, policy=policy, counter=counter)
    return b"".join(parts)

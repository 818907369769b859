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


class Deadline:
    """A wall-clock budget (monotonic), or none at all (`seconds=None`)."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds
        self.cancelled = threading.Event()   # set when the caller has given up on the workers
        self.retries = Counter()             # attempts retried under this budget, for the summary

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


def default_policy() -> RetryPolicy:
    """`CACHEKEEPER_STALL_TIMEOUT` (seconds without a byte before an attempt is abandoned) tunes the
    one knob a fleet may want to; the deadline caps it anyway."""
    from ..bounds import STALL_TIMEOUT, checked_env

    stall = checked_env("CACHEKEEPER_STALL_TIMEOUT", STALL_TIMEOUT)   # a typo is an error, never ignored
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
    deadline = deadline or Deadline()
    policy = policy or default_policy()
    where = f"{store.url}/{key}"
    got = 0
    attempt = 0
    while True:
        deadline.check(f"reading {where}")
        end = None if length is None else start + length
        try:
            body = store.open_range(key, start + got, end, deadline.timeout(policy.stall),
                                    min(policy.connect, deadline.timeout(policy.connect)))
            try:
                _check_total(where, body.total, total, limit)
                for chunk in body.chunks(READ_CHUNK):
                    if length is not None and got + len(chunk) > length:
                        chunk = chunk[:length - got]   # never past the declared size
                    if limit is not None and got + len(chunk) > limit:
                        raise IntegrityError(f"{where} is larger than {limit} bytes, the most allowed here")
                    sink(chunk)
                    got += len(chunk)
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
            pause = policy.delay(attempt)
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

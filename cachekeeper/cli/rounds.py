"""The sidecar loop `capture --watch` and `report --watch` share: a round every interval until the unit
or pod stops (SIGTERM/SIGINT end the wait early), then one last round so nothing recorded is left."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from types import FrameType

from ..errors import CachekeeperError
from .options import say


def every(interval: float, once: Callable[[], None], transient: tuple[type[CachekeeperError], ...],
          kept: str) -> None:
    """Run `once` every `interval` seconds; a `transient` failure is one warning line ending in `kept`
    (what the next round retries), not the end of the sidecar."""
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        deadline = time.monotonic() + interval
        while not stopping and time.monotonic() < deadline:
            time.sleep(min(0.2, interval))
        last = stopping   # a signal that lands during this round still gets a round after it
        try:
            once()
        except transient as exc:
            say(f"warning: {exc.message}; {kept}")
        if last:
            return

"""A claim's lease, kept alive by a heartbeat thread for as long as the build and its upload run.

The lease is short (default 30 s) and renewed every `heartbeat` seconds, so a worker that dies (kill -9,
a lost node) stops renewing and its entry is claimable again within about one lease period; a live
worker keeps its entry however long the compile takes. A renewal that finds the lease taken (the row was
reclaimed after expiry) sets `lost`, and the build is stopped: the new holder owns the entry now.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from ..errors import CatalogError, UsageError

if TYPE_CHECKING:
    from ..catalog import Catalog, Claim

DEFAULT_LEASE_S = 30.0
DEFAULT_HEARTBEAT_S = 5.0
FIRST_POLL_S = 0.1


@dataclass(frozen=True)
class LeaseSettings:
    lease_s: float = DEFAULT_LEASE_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S

    def __post_init__(self) -> None:
        if not self.heartbeat_s > 0:
            raise UsageError(f"the heartbeat must be a positive number of seconds, not {self.heartbeat_s:g}")
        if not self.lease_s > self.heartbeat_s:
            raise UsageError(f"the lease ({self.lease_s:g} s) is not longer than the heartbeat "
                             f"({self.heartbeat_s:g} s): the lease would lapse between renewals",
                             "make the lease at least twice the heartbeat (defaults: 30 and 5 seconds)")


class Heartbeat:
    """Renews `claim` every `heartbeat_s` on its own thread until the block ends."""

    def __init__(self, catalog: Catalog, claim: Claim, settings: LeaseSettings) -> None:
        self._catalog, self._claim, self._settings = catalog, claim, settings
        self.lost = threading.Event()      # the lease is gone: stop building
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ck-heartbeat-{claim.entry_key[:8]}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._settings.heartbeat_s):
            try:
                if not self._catalog.renew(self._claim, self._settings.lease_s):
                    self.lost.set()
                    return
            except CatalogError:
                # The database is briefly unreachable: keep trying until the lease itself runs out.
                continue


class Backoff:
    """The pause between polls for entries other workers hold (`--wait`): 0.1 s at first, doubling up to
    `ceiling_s`. A held entry is often moments from done (the fleet's last builds end together), so a
    fixed long pause would idle every worker past the end of the run; the doubling keeps N idle workers
    from polling the catalog at 10 Hz through a long compile."""

    def __init__(self, ceiling_s: float, first_s: float = FIRST_POLL_S) -> None:
        self._ceiling_s = ceiling_s
        self._first_s = min(first_s, ceiling_s)
        self._next_s = self._first_s

    def next_s(self) -> float:
        """The pause to take now; the one after it is twice as long, up to the ceiling."""
        pause = self._next_s
        self._next_s = min(self._next_s * 2, self._ceiling_s)
        return pause

    def sleep(self) -> None:
        time.sleep(self.next_s())

    def reset(self) -> None:
        """Progress was made: the next wait starts short again."""
        self._next_s = self._first_s

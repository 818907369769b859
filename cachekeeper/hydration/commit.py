"""The commit pool: verified temp files made durable and renamed into place on threads of their own.

Inline, each file's fsync stopped its stream for a disk round trip (most of a small-file hydrate's wall
time went to waiting there); here the streams keep receiving, and many fsyncs in flight at once let the
block layer merge their cache flushes. The order per file is unchanged: data durable, then the rename,
then recorded as placed. Without `durable` (durability "boot": the state file is trusted only within
this boot) the pool only renames and records.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

from ..fs.atomic import AtomicFile, fsync_dir
from .plan import Placement

COMMIT_THREADS = 16
COMMIT_BACKLOG = 64

# place(placement, lstat of the placed file, parent_synced=...): records a file as placed
Place = Callable[..., None]


class Committer:
    """fsync + rename + record. `backlog` bounds the verified files waiting (each holds an open
    descriptor); threads start as work arrives (a one-file hydrate starts one)."""

    def __init__(self, place: Place, threads: int = COMMIT_THREADS, backlog: int = COMMIT_BACKLOG, *,
                 durable: bool = True) -> None:
        self.place = place
        self.durable = durable
        self.jobs: queue.SimpleQueue[tuple[Placement, AtomicFile] | None] = queue.SimpleQueue()
        self.room = threading.Semaphore(backlog)
        self.cond = threading.Condition()
        self.pending = 0
        self.max_threads = threads
        self.threads = 0
        self.error: BaseException | None = None

    def submit(self, p: Placement, out: AtomicFile) -> None:
        self.room.acquire()
        with self.cond:
            self.pending += 1
            start = self.threads < min(self.max_threads, self.pending)
            self.threads += start
        if start:
            threading.Thread(target=self._work, name="ck-commit", daemon=True).start()
        self.jobs.put((p, out))

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            p, out = job
            try:
                st = out.commit(fsync=self.durable)
                if self.durable:
                    fsync_dir(os.path.dirname(p.target))  # the rename, durable while the streams go on
                self.place(p, st, parent_synced=True)
            except BaseException as exc:  # handed to execute() by drain()
                with self.cond:
                    self.error = self.error or exc
            finally:
                self.room.release()
                with self.cond:
                    self.pending -= 1
                    self.cond.notify_all()

    def drain(self, timeout: float | None) -> None:
        """Wait for every submitted file to be placed (or `timeout`: a file still in its fsync then is
        simply not recorded; a later run adopts it by its hash). Then the threads end."""
        with self.cond:
            self.cond.wait_for(lambda: self.pending == 0, timeout)
            threads = self.threads
        for _ in range(threads):
            self.jobs.put(None)

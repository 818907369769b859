"""Run one build subprocess: own process group, timeout, log to a file, tail kept for the record.

A crash, a timeout or a non-zero exit is a failed build with the log tail; it never takes the worker
down with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import BuildCommand

TAIL_BYTES = 4000


@dataclass(frozen=True)
class RunResult:
    returncode: int | None      # None: killed on timeout
    seconds: float
    log_tail: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        if self.returncode is None:
            return f"timed out after {self.seconds:.0f}s"
        if self.returncode < 0:
            return f"killed by signal {signal.Signals(-self.returncode).name}"
        return f"exited with status {self.returncode}"


def tail(path: Path, limit: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run_build(cmd: BuildCommand, *, timeout: float, log_path: Path, cwd: Path,
              on_tick: Callable[[], object] | None = None, tick_s: float = 10.0) -> RunResult:
    """Run `cmd`; `on_tick` is called every `tick_s` while it runs (lease renewal)."""
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd.argv, env=cmd.env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = t0 + timeout
        returncode: int | None = None
        while True:
            try:
                returncode = proc.wait(timeout=min(tick_s, max(0.0, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    _kill_group(proc)
                    returncode = None
                    break
                if on_tick is not None:
                    on_tick()
    return RunResult(returncode, time.monotonic() - t0, tail(log_path))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # The compile may have spawned compiler workers: end the whole group, not just the child.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

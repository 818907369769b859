"""Run one build subprocess: own process group, timeout, log to a file, tail kept for the record.

A crash, a timeout or a non-zero exit is a failed build with the log tail; it never takes the worker
down with it. The reverse holds too: the build runs under `guard.py`, which kills the build's whole
process group when the worker dies, even by SIGKILL, so no orphaned compile keeps a device busy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..backends.base import BuildCommand

TAIL_BYTES = 4000
GUARD = Path(__file__).with_name("guard.py")


class Stop(Protocol):
    """What stops a build when set: a `threading.Event`, or several (prebuild.AnyOf)."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class RunResult:
    returncode: int | None      # None: killed on timeout (or on `stop`)
    seconds: float
    log_tail: str
    stopped: bool = False       # killed because `stop` was set (the lease was lost)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        if self.stopped:
            return f"stopped after {self.seconds:.0f}s: the lease on the entry was lost"
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


def guarded_argv(argv: list[str]) -> list[str]:
    """`argv` under the guard: -I -S keep the guard's own start to a few milliseconds."""
    return [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), *argv]


def run_build_process(cmd: BuildCommand, *, timeout: float, log_path: Path, cwd: Path,
                      on_tick: Callable[[], object] | None = None, tick_s: float = 10.0,
                      stop: Stop | None = None, poll_s: float = 0.25) -> RunResult:
    """Run `cmd`; `on_tick` is called every `tick_s` while it runs; setting `stop` kills the build."""
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(guarded_argv(cmd.argv), env=cmd.env, cwd=cwd, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = t0 + timeout
        next_tick = t0 + tick_s
        returncode: int | None = None
        stopped = False
        try:
            while True:
                now = time.monotonic()
                try:
                    returncode = proc.wait(timeout=max(0.0, min(poll_s, deadline - now, next_tick - now)))
                    break
                except subprocess.TimeoutExpired:
                    now = time.monotonic()
                    if now >= deadline or (stop is not None and stop.is_set()):
                        stopped = now < deadline
                        _kill_group(proc)
                        returncode = None
                        break
                    if now >= next_tick:
                        next_tick = now + tick_s
                        if on_tick is not None:
                            on_tick()
        except BaseException:
            _kill_group(proc)   # the worker is going down (Ctrl-C, an error in on_tick): so is the build
            raise
        finally:
            _kill_stragglers(proc.pid)
    return RunResult(returncode, time.monotonic() - t0, tail(log_path), stopped)


def _kill_stragglers(pgid: int) -> None:
    # Compiler workers the build left behind in its group: the guard has exited, nothing else owns them.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


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

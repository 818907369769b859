"""What the harness modules share to run a server process for a session: a free port, a start that
polls until ready and retries on a port taken in the meantime, a stop by PID, a log tail, and the
session's scratch directory. Each module keeps what is its own: the command line and the probe.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

S = TypeVar("S")
Process = subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """Linux: SIGTERM the server if pytest itself is killed, so no server outlives its session."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def spawn(cmd: Sequence[str], workdir: Path, log_path: Path, env: Mapping[str, str] | None = None) -> Process:
    """Start `cmd` in `workdir`, its output appended to `log_path`, to die with this process (Linux)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=workdir, env=env,
                                preexec_fn=_die_with_parent if sys.platform == "linux" else None)


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop(proc: Process, timeout: float) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within `timeout` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass(frozen=True)
class ServerKind:
    """How to tell that one kind of server is up, and how long to give it to start and to stop."""

    name: str  # in "<name> did not start"
    program: str  # in "<program> exited with code N"
    start_timeout: float
    stop_timeout: float
    poll_interval: float
    not_yet: tuple[type[BaseException], ...]  # what the probe may raise while the server is still starting

    def _wait_ready(self, proc: Process, probe: Callable[[], object]) -> str | None:
        """None once `probe` succeeds, else why not."""
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"{self.program} exited with code {proc.returncode}"
            try:
                probe()
                return None
            except self.not_yet as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(self.poll_interval)
        return f"not ready after {self.start_timeout:.0f}s (last probe: {last})"

    def start(self, launch: Callable[[], tuple[S, Process]], probe: Callable[[S], object],
              log_path: Path) -> tuple[S, Process]:
        """Launch a server and poll `probe` until it passes. A port picked free can be taken before the
        server binds it, so a start that failed with "address already in use" is tried again (on other
        ports: `launch` picks them)."""
        failure = ""
        for _attempt in range(3):
            server, proc = launch()
            failure = self._wait_ready(proc, functools.partial(probe, server)) or ""
            if not failure:
                return server, proc
            stop(proc, self.stop_timeout)
            if "address already in use" not in log_tail(log_path, 200):
                break
        pytest.fail(f"{self.name} did not start: {failure}\n--- {log_path} (tail) ---\n{log_tail(log_path)}",
                    pytrace=False)

    @contextlib.contextmanager
    def session(self, prefix: str, start: Callable[[Path], tuple[S, Process]]) -> Iterator[S]:
        """Start a server in a fresh scratch directory; stop it and delete the directory on exit, also
        when the start itself fails."""
        workdir = Path(tempfile.mkdtemp(prefix=prefix))
        proc: Process | None = None
        try:
            server, proc = start(workdir)
            yield server
        finally:
            if proc is not None:
                stop(proc, self.stop_timeout)
            shutil.rmtree(workdir, ignore_errors=True)

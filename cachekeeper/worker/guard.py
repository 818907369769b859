"""The build subprocess's guard: it dies with the worker and takes the whole build with it.

`run_build_process` starts this file as a script (`python -I -S guard.py PARENT_PID ARGV...`), the leader
of a new process group. It asks the kernel for SIGTERM when its parent dies (PR_SET_PDEATHSIG, Linux), runs the
build in the same group, and on SIGTERM/SIGHUP kills the whole group (the compiler's own workers too).
So a worker killed with SIGKILL leaves no compile running. Stdlib only, no cachekeeper import: it must
start in milliseconds and never import what the build does not need.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def _kill_group(signum: int, _frame: object) -> None:
    os.killpg(0, signal.SIGKILL)   # the group is ours: guard, build and whatever the build spawned


def main(argv: list[str]) -> int:
    parent = int(argv[0])
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _kill_group)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:     # the worker died before the signal was armed
        return 137
    pid = os.fork()
    if pid == 0:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(argv[1], argv[1:])
        except OSError as exc:
            print(f"cannot run {argv[1]}: {exc.strerror}", file=sys.stderr)
            os._exit(127)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):  # report the build's death as our own, so the worker sees the signal
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The suite started with SIGINT ignored (a background job of a shell without job control) still gets
Ctrl-C as KeyboardInterrupt, in itself and in the processes it starts (tests/harness/signals.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = """\
import signal, subprocess, sys

def test_an_interrupt_is_a_keyboard_interrupt_here_and_in_a_child():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    child = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    assert subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout == "True\\n"
"""


def run_ignoring_sigint(tmp_path: Path, *plugin: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *plugin,
         str(tmp_path / "test_probe.py")],
        cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as `cmd &` starts it


@pytest.mark.parametrize(("plugin", "passes"), [((), False), (("-p", "tests.harness.signals"), True)])
def test_a_run_started_with_sigint_ignored_gets_keyboard_interrupt_back(
        tmp_path: Path, plugin: tuple[str, ...], passes: bool) -> None:
    proc = run_ignoring_sigint(tmp_path, *plugin)
    assert (proc.returncode == 0) is passes, proc.stdout[-2000:] + proc.stderr[-2000:]

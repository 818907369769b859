"""`cachekeeper dashboard` binds its port before it says where it serves: a port in use is one `error:` line,
a hint and exit 14 (docs/cli.md), with no URL printed first; `--port 0` prints the port it got, and serves
there until SIGTERM ends it normally."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_env import REPO, one_error_line, run_cli


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A home with an empty catalog at the head revision (the dashboard opens it read-only)."""
    home = tmp_path_factory.mktemp("dashboard") / "home"
    vars_ = {**os.environ, "CACHEKEEPER_HOME": str(home), "PYTHONPATH": str(REPO)}
    vars_.pop("CACHEKEEPER_CATALOG", None)
    run_cli(["db", "upgrade"], vars_, home.parent)
    yield vars_


def test_a_port_in_use_is_one_error_line_exit_14_and_no_url(env: dict[str, str], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_cli(["dashboard", "--port", str(port)], env, tmp_path, ok=False, timeout=60)
    assert proc.returncode == 14
    assert proc.stdout == "" and "http://" not in proc.stderr, proc.stdout + proc.stderr
    assert one_error_line(proc) == f"error: dashboard: port {port} on 127.0.0.1 is in use by another process"
    assert proc.stderr.splitlines()[1] == ("hint: another process listens on that port: stop it, or choose another "
                                           "--port (0: any free port; the dashboard prints the one it got)")


def test_a_host_that_is_not_this_machines_is_one_error_line_exit_14(env: dict[str, str], tmp_path: Path) -> None:
    proc = run_cli(["dashboard", "--host", "192.0.2.1", "--port", "0"], env, tmp_path, ok=False, timeout=60)
    assert proc.returncode == 14 and proc.stdout == ""
    assert one_error_line(proc) == "error: dashboard: cannot bind 192.0.2.1:0: Cannot assign requested address"
    assert "warning: binding" not in proc.stderr   # nothing said about a server that never started


def test_port_0_prints_the_port_it_got_and_serves_there_until_sigterm(env: dict[str, str], tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "cachekeeper", "dashboard", "--port", "0"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().strip()   # printed once the port is bound, before serving
        assert line.startswith("dashboard: http://127.0.0.1:") and not line.startswith("dashboard: http://127.0.0.1:0/")
        url = line.split()[1]
        port = int(url.rsplit(":", 1)[1].strip("/"))
        with socket.socket() as probe, pytest.raises(OSError):   # bound already: nobody else can take it
            probe.bind(("127.0.0.1", port))
        for _ in range(100):
            try:
                with urllib.request.urlopen(url, timeout=10) as page:
                    assert page.status == 200
                    break
            except OSError:   # uvicorn is still starting on the bound socket
                assert proc.poll() is None, proc.communicate()[1]
                time.sleep(0.1)
        else:
            pytest.fail(f"{url} never answered")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "error" not in err and out == "", out + err

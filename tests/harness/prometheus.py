"""A real Prometheus (Debian's `prometheus` package) on loopback, with node_exporter's textfile collector
and a Pushgateway beside it, for tests/observability.

Prometheus scrapes every second. Its targets come from file_sd files the tests write (`add_target`), so a
test registers the endpoint it just started (a dashboard, a report sidecar) and Prometheus picks it up
without a restart. node_exporter reads hydrate's textfiles from `textfile_dir`; the Pushgateway takes
prebuild's pushes; both are targets from the start (the Pushgateway with honor_labels, as documented).
The binaries are installed by scripts/test; without them the tests skip with that reason.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .process import Process, ServerKind, free_port, log_tail, spawn, stop

BINARIES = ("prometheus", "promtool", "prometheus-node-exporter", "prometheus-pushgateway")


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def skip_without_binaries() -> None:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (scripts/test installs Debian's prometheus, "
                    "prometheus-node-exporter and prometheus-pushgateway)")


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return bytes(resp.read())


KIND = ServerKind("prometheus", "prometheus", start_timeout=30, stop_timeout=10, poll_interval=0.2,
                  not_yet=(OSError,))


@dataclass
class Prometheus:
    url: str
    workdir: Path
    textfile_dir: Path
    node_exporter: str
    pushgateway: str

    def add_target(self, name: str, address: str, **labels: str) -> None:
        """A scrape target of job `cachekeeper` (file_sd: picked up without a restart)."""
        path = self.workdir / "targets" / f"{name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": [address], "labels": labels}]))
        tmp.rename(path)

    def query(self, expr: str) -> list[dict[str, Any]]:
        doc = json.loads(_get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])

    def wait_for(self, expr: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Poll an instant query until it returns a sample (scrapes run every second)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                targets = json.loads(_get(f"{self.url}/api/v1/targets"))["data"]["activeTargets"]
                health = [(t["scrapeUrl"], t["health"], t.get("lastError")) for t in targets]
                pytest.fail(f"Prometheus has no sample for {expr} after {timeout:.0f}s; targets: {health}\n"
                            f"--- log ---\n{log_tail(self.workdir / 'prometheus.log')}", pytrace=False)
            time.sleep(0.3)

    def value(self, expr: str, timeout: float = 30.0) -> float:
        result = self.wait_for(expr, timeout)
        assert len(result) == 1, result
        return float(result[0]["value"][1])


def _config(workdir: Path, node_exporter: str, pushgateway: str) -> str:
    return f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: cachekeeper
    file_sd_configs:
      - files: ['{workdir}/targets/*.json']
        refresh_interval: 1s
  - job_name: node
    static_configs:
      - targets: ['{node_exporter}']
  - job_name: pushgateway
    honor_labels: true
    static_configs:
      - targets: ['{pushgateway}']
"""


def _wait_http(url: str, proc: Process, workdir: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _get(url)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name} ---\n{log_tail(p)}" for p in workdir.glob("*.log"))
                pytest.fail(f"{url} did not answer\n{logs}", pytrace=False)
            time.sleep(0.1)


@contextlib.contextmanager
def prometheus_stack() -> Iterator[Prometheus]:
    skip_without_binaries()
    workdir = Path(tempfile.mkdtemp(prefix="ck-prom-"))
    procs: list[Process] = []
    try:
        (workdir / "targets").mkdir()
        textfiles = workdir / "textfile"
        textfiles.mkdir()
        node = f"127.0.0.1:{free_port()}"
        procs.append(spawn(["prometheus-node-exporter", f"--web.listen-address={node}", "--collector.disable-defaults",
                            "--collector.textfile", f"--collector.textfile.directory={textfiles}"],
                           workdir, workdir / "node_exporter.log"))
        push = f"127.0.0.1:{free_port()}"
        procs.append(spawn(["prometheus-pushgateway", f"--web.listen-address={push}"], workdir,
                           workdir / "pushgateway.log"))
        (workdir / "prometheus.yml").write_text(_config(workdir, node, push))

        def launch() -> tuple[str, Process]:
            url = f"http://127.0.0.1:{free_port()}"
            return url, spawn(["prometheus", f"--config.file={workdir / 'prometheus.yml'}",
                               f"--storage.tsdb.path={workdir / 'data'}",
                               f"--web.listen-address={url.removeprefix('http://')}"],
                              workdir, workdir / "prometheus.log")

        url, proc = KIND.start(launch, lambda u: _get(f"{u}/-/ready"), workdir / "prometheus.log")
        procs.append(proc)
        for address, helper in zip((node, push), procs, strict=False):
            _wait_http(f"http://{address}/metrics", helper, workdir)
        yield Prometheus(url, workdir, textfiles, node, push)
    finally:
        for p in reversed(procs):
            stop(p, 10)
        shutil.rmtree(workdir, ignore_errors=True)

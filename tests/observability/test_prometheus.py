"""A real Prometheus on loopback reads what cachekeeper exposes: node_exporter's textfile collector reads
hydrate's file, Prometheus scrapes the report sidecar's and the dashboard's /metrics, a Pushgateway holds
prebuild's push, and the HTTP API answers with the values each command just produced."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta

from cachekeeper.reports.compiles import CompileInfo
from cachekeeper.runtime.miss_watch import CallRecord, Spool
from tests.harness.process import free_port
from tests.harness.prometheus import Prometheus

from .conftest import Ck, samples


def _fingerprint(ck: Ck) -> str:
    dest = ck.tmp / "probe"
    doc = json.loads(ck.run("hydrate", "--config", str(ck.config), "--dest", str(dest), "--json",
                            "--best-effort").stdout)
    return str(doc["fingerprint_id"])


def _wait_http(url: str, proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return str(resp.read().decode())
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return err


def test_prometheus_reads_a_hydrates_textfile_through_node_exporter(built: Ck, prom: Prometheus) -> None:
    target = prom.textfile_dir / "cachekeeper-hydrate.prom"
    doc = json.loads(built.run("hydrate", "--config", str(built.config), "--dest", str(built.tmp / "dest"),
                               "--json", "--metrics-file", str(target)).stdout)
    samples(target.read_text())   # the client library's parser reads it
    fp = doc["fingerprint_id"]
    sel = f'job="node",fingerprint="{fp}",backend="fake"'
    assert prom.value(f'cachekeeper_hydrate_outcome{{{sel},outcome="done"}}') == 1
    assert prom.value(f"cachekeeper_hydrate_fetched_files{{{sel}}}") == doc["files_fetched"] > 0
    assert prom.value(f"cachekeeper_hydrate_fetched_bytes{{{sel}}}") == doc["bytes_fetched"] > 0
    assert prom.value(f'cachekeeper_hydrate_entries{{{sel},state="hit"}}') == doc["counts"]["hit"] == 2
    # node_exporter saw no parse error in our file
    assert prom.value('node_textfile_scrape_error{job="node"}') == 0


def test_prometheus_scrapes_the_report_sidecars_runtime_counters(ck: Ck, prom: Prometheus) -> None:
    fp = _fingerprint(ck)
    spool = Spool(ck.tmp / "spool")
    for i in range(7):      # 7 calls of 128x64x1, the first 3 compiled (2 s each); 2 calls of 64x64x1
        # the compile ledger's reason on 2 of them (a served miss: no artifact for the shape); the third says none
        why = CompileInfo("no_artifact", 1, 2.0, "runtime", "inductor") if i < 2 else None
        spool.append(CallRecord("tiny", 128, 64, 1, None, None, i < 3, int(i < 3), 2.1 if i < 3 else 0.1, 1.7e9),
                     why)
    for _ in range(2):
        spool.append(CallRecord("tiny", 64, 64, 1, None, None, False, 0, 0.1, 1.7e9))
    (ck.tmp / "store").mkdir(exist_ok=True)
    port = free_port()
    proc = ck.popen("report", "--config", str(ck.config), "--spool", str(ck.tmp / "spool"), "--watch", "1",
                    "--metrics-port", str(port), CACHEKEEPER_STORE=f"file://{ck.tmp / 'store'}")
    try:
        _wait_http(f"http://127.0.0.1:{port}/metrics", proc)
        prom.add_target("report", f"127.0.0.1:{port}", case="report")
        sel = f'case="report",fingerprint="{fp}",model="tiny"'
        assert prom.value(f'cachekeeper_runtime_calls_total{{{sel},shape="128x64x1"}}') == 7
        compiled = f'cachekeeper_runtime_compiled_calls_total{{{sel},shape="128x64x1"'
        assert prom.value(f'{compiled},reason="no_artifact"}}') == 2
        assert prom.value(f'{compiled},reason="unknown"}}') == 1
        assert prom.value(f"sum({compiled}}})") == 3
        assert prom.value(f'cachekeeper_runtime_calls_total{{{sel},shape="64x64x1"}}') == 2
        assert prom.value(f'count(cachekeeper_runtime_compiled_calls_total{{{sel},shape="64x64x1"}}) or vector(0)') == 0
        seconds = f'cachekeeper_runtime_compile_seconds_total{{{sel},shape="128x64x1",reason="no_artifact"}}'
        assert prom.value(seconds) > 0
        assert prom.value(f'cachekeeper_report_interval_seconds{{case="report",fingerprint="{fp}"}}') == 1
        last = prom.value(f'cachekeeper_report_last_round_timestamp_seconds{{case="report",fingerprint="{fp}"}}')
        assert time.time() - last < 30
    finally:
        err = _stop(proc)
    assert "Traceback" not in err and not [w for w in err.splitlines() if w.startswith("warning:")], err


def test_prometheus_scrapes_the_dashboards_catalog_queue_and_coverage(built: Ck, prom: Prometheus) -> None:
    fp = _fingerprint(built)
    # Two queue jobs: one pending, one running whose worker stopped renewing its lease a minute ago.
    past = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S.%f")
    with sqlite3.connect(built.tmp / "home" / "catalog.db") as db:
        db.executemany("INSERT INTO build_jobs (fingerprint_id, entry_key, spec, status, worker, lease_expires_at, "
                       "attempts, updated_at) VALUES (?, ?, '{}', ?, ?, ?, 1, ?)",
                       [("f" * 16, "a" * 64, "pending", None, None, past),
                        ("f" * 16, "b" * 64, "running", "dead-worker", past, past)])
    # A wider config: the dashboard's coverage of it is 2 of 4 built.
    wide = built.tmp / "wide.yaml"
    wide.write_text(built.config.read_text().replace("height: [64, 128]", "height: [64, 128, 256, 512]"))
    port = free_port()
    proc = built.popen("dashboard", "--port", str(port), "--config", str(wide))
    try:
        text = _wait_http(f"http://127.0.0.1:{port}/metrics", proc)
        samples(text)
        prom.add_target("dashboard", f"127.0.0.1:{port}", case="dashboard")
        sel = f'case="dashboard",fingerprint="{fp}",backend="fake"'
        assert prom.value(f"cachekeeper_catalog_entries_built{{{sel}}}") == 2
        assert prom.value(f"cachekeeper_catalog_captured_sets{{{sel}}}") == 0
        assert prom.value('cachekeeper_queue_jobs{case="dashboard",status="pending"}') == 1
        assert prom.value('cachekeeper_queue_jobs{case="dashboard",status="running"}') == 1
        assert prom.value('cachekeeper_queue_expired_leases{case="dashboard"}') == 1
        assert prom.value(f'cachekeeper_coverage_entries{{{sel},state="built"}}') == 2
        assert prom.value(f'cachekeeper_coverage_entries{{{sel},state="missing"}}') == 2
        assert prom.value(f"cachekeeper_coverage_ratio{{{sel}}}") == 0.5
    finally:
        _stop(proc)


def test_prometheus_reads_a_prebuilds_push_from_the_pushgateway(ck: Ck, prom: Prometheus) -> None:
    proc = ck.run("prebuild", str(ck.config), "--metrics-push", f"http://{prom.pushgateway}", "--worker", "w-push")
    assert not [w for w in proc.stderr.splitlines() if w.startswith("warning:")], proc.stderr
    sel = 'job="cachekeeper_prebuild",worker="w-push"'
    assert prom.value(f'cachekeeper_prebuild_entries{{{sel},outcome="built"}}') == 2
    seconds = prom.wait_for(f'cachekeeper_prebuild_entry_duration_seconds{{{sel},outcome="built"}}')
    assert sorted(r["metric"]["shape"] for r in seconds) == ["128x64x1", "64x64x1"]
    assert all(float(r["value"][1]) > 0 and r["metric"]["model"] == "tiny" for r in seconds)

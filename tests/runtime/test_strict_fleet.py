"""Strict serving and the compile ledger across the cache's life, end to end on a file store with the fake
backend (tests/fakes.py) and a SIMULATED static-shape server (tests/runtime/strict_serve.py: a graph per
shape, written when missing; no counters of its own, so the ledger sees compiles by the files they add).
Every step is the real `cachekeeper` command; no torch.

    prebuild 64x64, 128x64 ─▶ hydrate ─▶ serve under fail / report ─▶ report (--metrics-port) ─▶ scrape
    and the same after gc --dest, a node-cache hydrate, an image upgrade with --best-effort, hot first
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.config import load_config
from cachekeeper.hydration import ready
from tests.fakes import ENABLE, fake_config, served
from tests.harness.process import free_port

REPO = Path(__file__).resolve().parents[2]


class Fleet:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp   # each test's own dir (hosts, spool); the store and the config stay where they are
        (tmp / "model").mkdir()
        self.config = tmp / "ck.yaml"
        self.config.write_text(fake_config(tmp / "model", heights="64, 128"))
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEKEEPER_", "FAKE_"))}
        self.env = {**clean, **ENABLE, "PYTHONPATH": str(REPO), "CACHEKEEPER_STORE": f"file://{tmp / 'store'}",
                    "CACHEKEEPER_HOME": str(tmp / "home"), "FAKE_SHARED_DIR": str(tmp / "shared"),
                    "FAKE_GRAPH_FILES": "1", "FAKE_SMALL_FILES": "3", "FAKE_LARGE_BYTES": "1000"}
        (tmp / "store").mkdir()

    def run(self, *args: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                              env={**self.env, **env}, cwd=self.tmp, timeout=120)
        assert "Traceback" not in proc.stderr, proc.stderr
        if ok:
            assert proc.returncode == 0, proc.stderr
        return proc

    def ck(self, *args: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run("cachekeeper", *args, ok=ok, **env)

    def hydrate(self, dest: Path, *args: str, **env: str) -> Path:
        self.ck("hydrate", "--config", str(self.config), "--dest", str(dest), *args, **env)
        return served(dest)

    def serve(self, served_dir: Path, *shapes: str, strict: str, spool: Path | None = None,
              **env: str) -> dict[str, Any]:
        proc = self.run("tests.runtime.strict_serve", str(self.config), *shapes, FAKE_CACHE_DIR=str(served_dir),
                        CACHEKEEPER_STRICT=strict, CACHEKEEPER_SPOOL=str(spool or self.tmp / "spool"), **env)
        out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
        out["stderr"] = proc.stderr
        return out

    def key(self, shape: str) -> str:
        [entry] = [e for e in load_config(self.config).entries() if e.spec.shape.label() == shape]
        return entry.spec.key


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One store for the module: the matrix built for toolchain 1 (this image) and 0 (the image before)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CACHEKEEPER_BACKENDS", ENABLE["CACHEKEEPER_BACKENDS"])   # the fake backend, here too
        f = Fleet(tmp_path_factory.mktemp("fleet"))
        f.ck("prebuild", str(f.config), "--no-catalog")
        f.ck("prebuild", str(f.config), "--no-catalog", FAKE_TOOLCHAIN="0")
        yield f


@pytest.fixture
def fleet(built: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """The module's store, with this test's own hosts and spool under `tmp`."""
    monkeypatch.setenv("CACHEKEEPER_BACKENDS", ENABLE["CACHEKEEPER_BACKENDS"])
    built.tmp = tmp_path
    return built


def errors(out: dict[str, Any]) -> list[str | None]:
    return [c["error"] for c in out["calls"]]


def test_fail_serves_a_hydrated_dir_without_an_error_and_refuses_a_shape_the_matrix_lacks(fleet: Fleet) -> None:
    dest = fleet.hydrate(fleet.tmp / "host")
    out = fleet.serve(dest, "64x64", "128x64", "96x64", strict="fail")
    assert errors(out) == [None, None, "CompileRefused"]
    refused = out["calls"][2]
    assert refused["exit_code"] == 15 and refused["compiled"] == 1   # the fake runtime told only afterwards
    assert refused["message"].startswith("strict: model tiny at 96x64x1 compiled on fake (1 new files in the "
                                         "served dir, ")
    assert "the compile already ran" in refused["message"]
    assert f"no entry of {fleet.config} has model tiny at 96x64x1" in refused["message"]
    assert refused["key"] and f"the entry that would serve it: entry {refused['key']}, once 96x64x1 is in the " \
        "matrix" in refused["message"]
    assert refused["message"].endswith("fix: add 96x64x1 to model tiny's shapes and prebuild it")
    [row] = out["ledger"]["rows"]
    assert (row["shape"], row["reason"], row["calls"], row["refused"]) == ("96x64x1", "no_artifact", 1, 1)
    assert out["ledger"]["recent"][0]["source"] == "files"


def test_report_counts_and_warns_once_per_shape_and_the_sidecar_serves_the_reason(fleet: Fleet) -> None:
    dest = fleet.hydrate(fleet.tmp / "host")
    out = fleet.serve(dest, "96x64", "96x64", "64x64", "96x64", strict="report")
    assert errors(out) == [None] * 4
    warned = [ln for ln in out["stderr"].splitlines() if "strict: model tiny at 96x64x1 compiled" in ln]
    assert len(warned) == 1, out["stderr"]
    assert out["ledger"]["compiled_calls"] == 1 and out["ledger"]["by_reason"] == {"no_artifact": 1}

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "cachekeeper", "report", "--config", str(fleet.config),
                             "--dest", str(fleet.tmp / "host"), "--spool", str(fleet.tmp / "spool"), "--watch", "1",
                             "--metrics-port", str(port)], env=fleet.env, cwd=fleet.tmp,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        scrape = _scrape_until(port, "cachekeeper_runtime_compiled_calls_total{", proc)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    [compiled] = [ln for ln in scrape.splitlines() if ln.startswith("cachekeeper_runtime_compiled_calls_total{")]
    assert 'model="tiny"' in compiled and 'shape="96x64x1"' in compiled and 'reason="no_artifact"' in compiled
    assert compiled.endswith(" 1.0")
    assert next(ln for ln in scrape.splitlines() if ln.startswith("cachekeeper_runtime_calls_total{")
            and 'shape="96x64x1"' in ln).endswith(" 3.0")


def _scrape_until(port: int, needle: str, proc: subprocess.Popen[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            text = ""
        if needle in text:
            return text
        time.sleep(0.3)
    raise AssertionError(f"{needle} never appeared on /metrics")


def test_after_gc_and_a_node_cache_hydrate_a_hit_is_a_hit_and_a_miss_a_miss(fleet: Fleet) -> None:
    disk = fleet.tmp / "persistent"   # toolchain 0 is the image before the upgrade
    fleet.hydrate(disk, FAKE_TOOLCHAIN="0")
    dest = fleet.hydrate(disk)                       # the new image, same disk
    fleet.ck("gc", "--dest", str(disk), "--run")     # the old toolchain's dir goes
    assert sorted(p.name for p in disk.iterdir() if not p.name.startswith(".")) == [dest.name]
    assert errors(fleet.serve(dest, "64x64", "128x64", "96x64", strict="fail")) == [None, None, "CompileRefused"]

    linked = fleet.hydrate(fleet.tmp / "node-host", "--node-cache", str(fleet.tmp / "node"))
    assert errors(fleet.serve(linked, "64x64", "128x64", "96x64", strict="fail")) == [None, None, "CompileRefused"]


def test_an_image_upgrade_with_best_effort_and_nothing_built_fails_at_the_first_call_or_reports_each(
        fleet: Fleet) -> None:
    dest = fleet.hydrate(fleet.tmp / "host", "--best-effort", FAKE_TOOLCHAIN="2")   # nothing built for it
    out = fleet.serve(dest, "64x64", strict="fail")
    [call] = out["calls"]
    assert call["error"] == "CompileRefused" and call["compiled"] == 0, "refused before the call ran"
    assert call["message"] == (f"strict mode fail: no hydrated dir: the runtime's cache dir variable names {dest}, "
                               "which no hydrate filled (no .cachekeeper/state.json there)")
    reported = fleet.serve(dest, "64x64", strict="report")
    assert errors(reported) == [None]
    [row] = reported["ledger"]["rows"]
    assert row["reason"] == "no_artifact" and row["key"] == fleet.key("64x64x1")
    assert "not built for this toolchain" in reported["stderr"]


def test_hot_first_a_shape_not_yet_placed_is_not_yet_hydrated_not_a_miss_of_the_matrix(fleet: Fleet) -> None:
    host = fleet.tmp / "host"
    dest = fleet.hydrate(host, "--shape", "64x64x1")   # phase 1 of hot first: the hottest entry only ...
    ready.mark(host, ready.READY, [fleet.key("64x64x1")], "", None)   # ... and its ready marker, as the engine
    out = fleet.serve(dest, "64x64", "128x64", "96x64", strict="fail")
    assert errors(out) == [None, "NotYetHydrated", "CompileRefused"]
    waiting = out["calls"][1]
    assert waiting["key"] == fleet.key("128x64x1") and waiting["exit_code"] == 15
    assert "its entry is not hydrated yet" in waiting["message"]
    assert f"wait for {host / '.cachekeeper' / 'complete'} before serving 128x64x1" in waiting["message"]
    assert "no entry of" in out["calls"][2]["message"], "a shape the matrix lacks is a miss, hot first or not"
    assert (dest / "graphs" / "tiny-128x64x1.neff").is_file(), "the runtime told only afterwards: it compiled"
    other = fleet.hydrate(fleet.tmp / "host-2", "--shape", "64x64x1")
    ready.mark(fleet.tmp / "host-2", ready.READY, [fleet.key("64x64x1")], "", None)
    reported = fleet.serve(other, "128x64", strict="report")
    assert reported["ledger"]["by_reason"] == {"not_hydrated": 1}

    fleet.hydrate(host)   # phase 2: the rest, then the complete marker
    ready.mark(host, ready.COMPLETE, [fleet.key("64x64x1"), fleet.key("128x64x1")], "", None)
    assert errors(fleet.serve(dest, "64x64", "128x64", strict="fail")) == [None, None]


def test_the_canary_fails_every_entry_of_a_dest_with_nothing_for_this_toolchain(fleet: Fleet) -> None:
    fleet.hydrate(fleet.tmp / "host", "--best-effort", FAKE_TOOLCHAIN="2")
    proc = fleet.ck("canary", "--config", str(fleet.config), "--dest", str(fleet.tmp / "host"), "--json", ok=False,
                    FAKE_TOOLCHAIN="2")
    assert proc.returncode == 15
    doc = json.loads(proc.stdout)
    assert not doc["ok"] and [e["shape"] for e in doc["toolchains"][0]["entries"]] == ["64x64x1", "128x64x1"]
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert line.startswith("error: canary: 2 of 2 entries would compile on this host: tiny 64x64x1 on fake (entry ")
    assert "hint: add each shape named to the config's matrix" in proc.stderr

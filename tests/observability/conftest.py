"""What the observability tests share: the `cachekeeper` command on the fake backend (no torch), a
config of two entries, and one real Prometheus stack per module (tests/harness/prometheus.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes import ENABLE, fake_config
from tests.harness.prometheus import Prometheus, prometheus_stack

REPO = Path(__file__).resolve().parents[2]


class Ck:
    """`cachekeeper` in a scratch dir: its own home (store, catalog) and the fake backend's config."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        (tmp / "model").mkdir()
        self.config = tmp / "ck.yaml"
        self.config.write_text(fake_config(tmp / "model"))
        self.vars = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKEEPER_")}
        self.vars.update(ENABLE, CACHEKEEPER_HOME=str(tmp / "home"), FAKE_SHARED_DIR=str(tmp / "shared"),
                         FAKE_LARGE_BYTES="20000", PYTHONPATH=str(REPO))

    def args(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "cachekeeper", *args]

    def run(self, *args: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self.args(*args), capture_output=True, text=True, env={**self.vars, **env},
                              cwd=self.tmp, timeout=120)
        assert "Traceback" not in proc.stderr, proc.stderr
        if ok:
            assert proc.returncode == 0, proc.stderr
        return proc

    def popen(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.args(*args), env={**self.vars, **env}, cwd=self.tmp, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.fixture()
def ck(tmp_path: Path) -> Ck:
    return Ck(tmp_path)


@pytest.fixture()
def built(ck: Ck) -> Ck:
    ck.run("prebuild", str(ck.config))
    return ck


@pytest.fixture(scope="module")
def prom() -> Iterator[Prometheus]:
    with prometheus_stack() as stack:
        yield stack


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, read by the client library's own parser (which fails on bad text)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`."""
    found = [v for (n, ls), v in samples(text).items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: ")]

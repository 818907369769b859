"""A prebuilt entry in a file store and a `cachekeeper` runner, for capture tests (no torch).

The entry is published with the real publisher (not the prebuild command), from files the fake backend
would have built; hydrate and capture then run through the real CLI in subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from cachekeeper.config import load_config
from cachekeeper.publish.upload import publish
from cachekeeper.stores.file import FileStore
from tests.cli_env import run_cli
from tests.fakes import ENABLE, FakeBackend, fake_config

REPO = Path(__file__).resolve().parents[2]

class World:
    """One store, one config, one prebuilt entry; `run` is the `cachekeeper` command of a host."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        (tmp / "model").mkdir()
        self.config = tmp / "ck.yaml"
        # These hosts capture and publish: a single-tenant fleet that opted in (`capture: publish`).
        self.config.write_text(fake_config(tmp / "model", heights="64") + "capture: publish\n")
        self.store_dir = tmp / "store"
        self.store_dir.mkdir()
        self.store_url = f"file://{self.store_dir}"
        self.vars = {**os.environ, **ENABLE, "CACHEKEEPER_HOME": str(tmp / "home"), "PYTHONPATH": str(REPO),
                     "CACHEKEEPER_STORE": self.store_url, "FAKE_SHARED_DIR": str(tmp / "shared")}
        for name in ("CACHEKEEPER_CATALOG", "CACHEKEEPER_SIGNING_KEY", "CACHEKEEPER_TRUSTED_KEYS", "FAKE_TOOLCHAIN"):
            self.vars.pop(name, None)
        self.spec = load_config(str(self.config)).entries()[0].spec

    def prebuild(self) -> None:
        built = self.tmp / "built"
        for i in range(3):
            (built / f"0{i}").mkdir(parents=True)
            (built / f"0{i}" / f"k{i}.neff").write_bytes(bytes([i]) * 1000)
        (built / "busy.lock").write_bytes(b"")
        publish(FileStore(self.store_dir), fingerprint=FakeBackend().fingerprint({}), spec=self.spec,
                roots={"cache": built}, include=FakeBackend().include)

    def run(self, *args: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        return run_cli(args, {**self.vars, **env}, self.tmp, ok=ok)

    def hydrate(self, dest: Path, *extra: str, **env: str) -> dict[str, object]:
        proc = self.run("hydrate", "--config", str(self.config), "--dest", str(dest), "--json", *extra, **env)
        report: dict[str, object] = json.loads(proc.stdout.splitlines()[0])
        return report

    def served(self, dest: Path, *extra: str, **env: str) -> Path:
        """Hydrate `dest`; the toolchain's own dir under it, where the runtime writes (hydration/destdir.py)."""
        return Path(str(self.hydrate(dest, *extra, **env)["dest"]))

    def capture(self, dest: Path, *extra: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run("capture", "--config", str(self.config), "--dest", str(dest), "--settle", "0.05", *extra,
                        ok=ok, **env)

    def captured_keys(self) -> list[str]:
        return sorted(p.relative_to(self.store_dir).as_posix()
                      for p in self.store_dir.glob("manifests/*/captured/*.json"))


def runtime_writes(dest: Path, rel: str, data: bytes) -> Path:
    """What Inductor and the Neuron runtime do: write a dot-temp beside the target, then rename."""
    target = dest / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.1234.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, target)
    old = target.stat().st_mtime_ns - 5_000_000_000  # written seconds ago: past any settle window
    os.utime(target, ns=(old, old))
    return target


def one_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The CLI's contract for bad input: one `error:` line, one `hint:` line, no traceback."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    hints = [line for line in proc.stderr.splitlines() if line.startswith("hint: ")]
    assert proc.returncode != 0 and len(errors) == 1 and len(hints) == 1, proc.stderr
    return errors[0]


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    for name, value in ENABLE.items():
        monkeypatch.setenv(name, value)  # the config names the fake backend in this process too
    w = World(tmp_path)
    w.prebuild()
    return w

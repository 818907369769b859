"""Traffic drives the prebuild, end to end on a file store with a SIMULATED static-shape server:

    prebuild 64x64 ─▶ host 1 serves 96x64 (compiles) ─▶ report ─▶ suggest --apply ─▶ validate
        ─▶ prebuild (exactly the new entry) ─▶ a fresh host 2 serves 96x64 with 0 compiles

Every step is the real `cachekeeper` command; the server is tests/reports/sim_serve.py wrapped by
`cachekeeper.runtime.watch`. No torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachekeeper.format.manifest import Manifest
from cachekeeper.stores.file import FileStore
from cachekeeper.stores.manifests import manifest_keys
from tests.fakes import ENABLE, fake_config, served

REPO = Path(__file__).resolve().parents[2]
HEADER = "# the fleet's matrix: edited by hand, and by `suggest --apply`\n"


class Fleet:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        (tmp / "model").mkdir()
        self.config = tmp / "ck.yaml"
        self.config.write_text(HEADER + fake_config(tmp / "model", heights="64").replace(
            "models:\n", "models:   # one tiny model\n"))
        self.store = tmp / "store"
        self.store.mkdir()
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKEEPER_")}
        self.env = {**clean, **ENABLE, "PYTHONPATH": str(REPO), "CACHEKEEPER_STORE": f"file://{self.store}",
                    "CACHEKEEPER_HOME": str(tmp / "home"), "FAKE_SHARED_DIR": str(tmp / "shared"),
                    "FAKE_GRAPH_FILES": "1", "FAKE_SMALL_FILES": "3", "FAKE_LARGE_BYTES": "1000"}
        self.env.pop("FAKE_TOOLCHAIN", None)
        self.log: list[str] = []

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                              env={**self.env, **env}, cwd=self.tmp, timeout=120)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        self.log.append(f"$ {' '.join(a.replace(str(self.tmp), '.') for a in args)}\n"
                        f"{proc.stdout}{proc.stderr}".replace(str(self.tmp), "."))
        return proc

    def ck(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run("cachekeeper", *args, **env)

    def serve(self, dest: Path, height: int, width: int, calls: int, spool: Path) -> int:
        proc = self.run("tests.reports.sim_serve", str(height), str(width), str(calls),
                        FAKE_CACHE_DIR=str(dest), CACHEKEEPER_SPOOL=str(spool))
        compiled: int = json.loads(proc.stdout.splitlines()[-1])["compiled"]
        return compiled

    def entry_shapes(self) -> set[str]:
        store = FileStore(self.store)
        out = set()
        for mk in manifest_keys(store, captured=False):
            m = Manifest.from_bytes(store.get_bytes(mk.key))
            if m.spec is not None:
                out.add(m.spec.shape.label())
        return out


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path)


def test_an_undeclared_shape_served_is_reported_suggested_prebuilt_and_then_served_without_compiling(
        fleet: Fleet) -> None:
    fleet.ck("prebuild", str(fleet.config), "--no-catalog")
    assert fleet.entry_shapes() == {"64x64x1"}

    host1, spool = fleet.tmp / "host1", fleet.tmp / "spool1"
    fleet.ck("hydrate", "--config", str(fleet.config), "--dest", str(host1))
    host1 = served(host1)   # the toolchain's own dir, which the env names
    assert fleet.serve(host1, 64, 64, 2, spool) == 0, "the declared shape was prebuilt"
    assert fleet.serve(host1, 96, 64, 3, spool) == 1, "the undeclared shape compiles once on this host"
    sent = json.loads(fleet.ck("report", "--config", str(fleet.config), "--spool", str(spool), "--json").stdout)
    assert sent["calls"] == 5 and sent["compiled"] == 1

    shown = fleet.ck("suggest", str(fleet.config)).stdout
    assert "add 96x64x1 to model tiny: 3 calls, 1 host compiled it" in shown
    assert "64x64x1" not in shown, "a prebuilt shape is not suggested"
    before = fleet.config.read_text()
    fleet.ck("suggest", str(fleet.config), "--apply")
    after = fleet.config.read_text()
    assert after.startswith(HEADER) and "models:   # one tiny model\n" in after, "comments and layout kept"
    assert [line for line in after.splitlines() if line not in before.splitlines()] == [
        "    shapes: [64x64x1, 96x64x1]"], "the one new line is the model's shapes"
    fleet.ck("validate", str(fleet.config))

    built = fleet.ck("prebuild", str(fleet.config), "--no-catalog").stderr.splitlines()
    assert fleet.entry_shapes() == {"64x64x1", "96x64x1"}
    entries = [line for line in built if "tiny/transformer" in line]
    assert [line.split()[0] for line in entries if "96x64x1" in line] == ["built"], built
    assert [line.split()[0] for line in entries if "64x64x1" in line and "96x64x1" not in line] == ["present"], \
        "exactly the suggested entry was built"

    host2 = fleet.tmp / "host2"
    fleet.ck("hydrate", "--config", str(fleet.config), "--dest", str(host2))
    host2 = served(host2)
    assert fleet.serve(host2, 96, 64, 3, fleet.tmp / "spool2") == 0, "the fresh host compiles nothing"
    again = fleet.ck("report", "--config", str(fleet.config), "--spool", str(fleet.tmp / "spool2"), "--json")
    assert json.loads(again.stdout)["compiled"] == 0
    out = Path(os.environ.get("CK_LOOP_LOG", fleet.tmp / "loop.log"))
    out.write_text("\n".join(fleet.log))

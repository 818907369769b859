"""The capture loop on SIMULATED TorchNeuron eager mode (tests/simulated): an op that production met
first compiles to a new NEFF in the hydrated dir; capture publishes it; the next host loads it.

Prebuild shape A, hydrate host 1, serve shape B there (new NEFFs), `capture --publish`, hydrate a fresh
host 2, serve B: the runtime compiles nothing. A few torch-importing processes (no diffusers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachekeeper.backends.neuron import NeuronBackend
from cachekeeper.config import load_config
from cachekeeper.publish.upload import publish
from cachekeeper.stores.file import FileStore
from tests.simulated import REPO
from tests.simulated.harness import clear_device_env, install

pytestmark = pytest.mark.torch
pytest.importorskip("torch")

CONFIG = """
version: 1
defaults:
  backends: [neuron]
  modes: [eager]
  dtypes: [float32]
  shapes: {{height: [64], width: [64], batch: [1]}}
backend_options:
  neuron: {{target: trn2}}
capture: publish
models:
  - name: tiny
    path: {model}
    component: transformer
"""


def serve(env: dict[str, str], cache: Path, height: int, width: int) -> dict[str, int]:
    proc = subprocess.run([sys.executable, "-m", "tests.capture.neuron_eager_serve", str(height), str(width)],
                          env={**env, "TORCH_NEURONX_NEFF_CACHE_DIR": str(cache),
                               "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": str(cache.parent / "locks")},
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counters: dict[str, int] = json.loads(proc.stdout.strip().splitlines()[-1])
    return counters


def cachekeeper(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "cachekeeper", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_new_eager_ops_captured_on_one_host_are_loaded_by_the_next(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    clear_device_env(monkeypatch)
    install(monkeypatch, tmp_path / "site")
    (tmp_path / "model").mkdir()
    config_path = tmp_path / "ck.yaml"
    config_path.write_text(CONFIG.format(model=tmp_path / "model"))
    config = load_config(str(config_path))
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKEEPER_")}
    env.update(CACHEKEEPER_STORE=f"file://{store}", CACHEKEEPER_HOME=str(tmp_path / "home"))

    # Prebuild shape A: the eager NEFFs of one request, published as the config's entry.
    prebuilt = serve(env, tmp_path / "build" / "cache", 64, 64)
    assert prebuilt["compiled"] > 0
    backend = NeuronBackend()
    store.mkdir()
    publish(FileStore(store), fingerprint=backend.fingerprint(config.backend_options_for("neuron")),
            spec=config.entries()[0].spec, roots={"cache": tmp_path / "build" / "cache"}, include=backend.include)

    host1 = Path(json.loads(cachekeeper(env, "hydrate", "--config", str(config_path), "--dest",
                                        str(tmp_path / "host1" / "neff"), "--json").stdout)["dest"])
    first = serve(env, host1, 128, 64)   # shape B: new ops compile at runtime, next to the hydrated NEFFs
    assert first["compiled"] > 0 and first["loaded"] > 0
    captured = json.loads(cachekeeper(env, "capture", "--config", str(config_path), "--dest", str(host1),
                                      "--publish", "--settle", "0.2", "--json").stdout)
    assert len(captured["files"]) == first["compiled"] and all(f.endswith(".neff") for f in captured["files"])

    report = json.loads(cachekeeper(env, "hydrate", "--config", str(config_path), "--dest",
                                    str(tmp_path / "host2" / "neff"), "--json").stdout.splitlines()[0])
    host2 = Path(report["dest"])
    assert report["counts"] == {"hit": 1, "missed": 0, "captured": 1}
    second = serve(env, host2, 128, 64)
    assert second["compiled"] == 0 and second["loaded"] == first["compiled"] + first["loaded"]

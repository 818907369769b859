"""Strict mode and the compile ledger on the SIMULATED TorchNeuron and TorchTPU (tests/simulated/pkgs, each
behaviour cited there: 0.1.0 torch_neuronx's metrics and NEFF cache, torch_tpu 0.2.0's tier-3 cache and
`_get_cache_stats().per_entry_stats[].compilation_duration`). A server (tests/runtime/device_serve.py) compiles
one graph per height with `torch.compile(backend=...)`; a first run fills a build dir, which is published and
hydrated for real (the store and hydrate code), then served under `fail`:

  * the hydrated graph is a hit: no error (strict mode never turns a hit into a failure);
  * another height compiles, and is refused right after (these runtimes tell only afterwards): the error says
    the compile ran, the ledger counts it from the runtime's own counters;
  * with the counters silent (Neuron metrics off; a TorchTPU without `_get_cache_stats`) the refusal still
    comes, from the new files in the served dir, and a warning says so once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.base import Backend
from cachekeeper.backends.neuron import NeuronBackend
from cachekeeper.backends.tpu import TPUBackend
from tests.simulated.harness import clear_device_env, entry, install, publish_and_hydrate

pytestmark = pytest.mark.torch
pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
BACKENDS: dict[str, tuple[Backend, dict[str, str], str]] = {
    "neuron": (NeuronBackend(), {"target": "trn2"}, "TORCH_NEURONX_NEFF_CACHE_DIR"),
    "tpu": (TPUBackend(), {"chip": "v6e", "topology": "2x4"}, "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"),
}
COUNTERS_ON = {"neuron": {"TORCH_NEURONX_METRICS_ENABLED": "1"}, "tpu": {}}
COUNTERS_OFF = {"neuron": {}, "tpu": {"OLD_TORCH_TPU": "1"}}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as mp:
        clear_device_env(mp)
        yield install(mp, tmp_path_factory.mktemp("strict-device-host") / "site")


def serve(name: str, cache: Path, tmp: Path, strict: str, *heights: int, **env: str) -> dict[str, Any]:
    var = BACKENDS[name][2]
    full = {**os.environ, var: str(cache), "CACHEKEEPER_STRICT": strict, "CACHEKEEPER_SPOOL": str(tmp / "spool"),
            "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": str(tmp / "locks"), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
            # a tier-2 cache of this process's own: nothing is served from the host's /dev/shm
            "TORCH_TPU_TIER2_COMPILATION_CACHE": f"strict-{os.getpid()}-{len(list(tmp.iterdir()))}", **env}
    proc = subprocess.run([sys.executable, "-m", "tests.runtime.device_serve", name, *map(str, heights)], env=full,
                          cwd=tmp, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-4000:]
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    out["stderr"] = proc.stderr
    return out


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def hydrated(request: pytest.FixtureRequest, host: Path, tmp_path_factory: pytest.TempPathFactory) \
        -> tuple[str, Path, Path]:
    """(backend, a dir hydrated from a build that compiled the height-8 graph, a scratch dir)."""
    name = request.param
    backend, options, _ = BACKENDS[name]
    tmp = tmp_path_factory.mktemp(f"strict-{name}")
    built = serve(name, tmp / "prebuild" / "cache", tmp, "off", 8, **COUNTERS_ON[name])
    assert built["runtime"]["compiled"] == 1
    dest = tmp / "boot"
    publish_and_hydrate(backend, options, entry(name, "full"), tmp / "prebuild", dest)
    return name, dest, tmp


def test_fail_serves_the_hydrated_graph_and_refuses_another_right_after_it_compiled(
        hydrated: tuple[str, Path, Path]) -> None:
    name, dest, tmp = hydrated
    out = serve(name, dest, tmp, "fail", 8, 8, 16, **COUNTERS_ON[name])
    assert [c["refused"] for c in out["calls"]] == [None, None, "CompileRefused"]
    assert out["runtime"]["loaded"] == 1 and out["runtime"]["compiled"] == 1
    refused = out["calls"][2]
    assert refused["compiled"] is True
    assert refused["message"].startswith(f"strict: model tiny-linear at 16x64x1 compiled on {name} (1 graph, ")
    assert "the compile already ran (the runtime tells only afterwards)" in refused["message"]
    [row] = out["ledger"]["rows"]
    assert (row["backend"], row["shape"], row["graphs"], row["refused"]) == (name, "16x64x1", 1, 1)
    assert out["ledger"]["recent"][0]["source"] == "runtime"
    assert not out["ledger"]["notes"]


def test_with_the_counters_silent_the_files_say_it_compiled_and_a_warning_says_so_once(
        hydrated: tuple[str, Path, Path]) -> None:
    name, dest, tmp = hydrated
    out = serve(name, dest, tmp, "fail", 8, 24, 32, **COUNTERS_OFF[name])
    assert [c["refused"] for c in out["calls"]] == [None, "CompileRefused", "CompileRefused"], \
        "never a compile passed as a hit"
    assert all(e["source"] == "files" and e["new_files"] == 1 for e in out["ledger"]["recent"])
    why = ("torch_neuronx metrics are off" if name == "neuron" else "this torch_tpu has no _get_cache_stats")
    said = [ln for ln in out["stderr"].splitlines() if why in ln]
    assert len(said) == 1 and said[0].endswith("compiles are seen by new files in the served dir only"), out["stderr"]
    assert out["ledger"]["notes"] == [said[0].removeprefix("cachekeeper: warning: ")]
